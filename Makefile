# Hermes build tasks. Every tool runs through the Go toolchain at the version go.mod pins.
export GOTOOLCHAIN := local

.PHONY: all build proto proto-check lint test test-short bench fuzz demo serve

all: build

build:
	go build -o bin/hermes ./cmd/hermes

# Regenerate the protobuf and gRPC code from proto/ with local plugins.
proto:
	go tool buf format -w
	go tool buf lint
	go tool buf generate

# Fail when the generated code is not what the .proto files produce.
proto-check:
	go tool buf format -d --exit-code
	go tool buf lint
	go tool buf generate
	git diff --exit-code -- proto

# Breaking-change check of the API against the main branch.
breaking:
	go tool buf breaking --against '.git#branch=main'

# gosec, pinned, run through the Go toolchain (nothing to install). Exclusions, each justified:
#   -exclude-generated      protoc/buf output is not ours to change;
#   -exclude-dir=test,bench test harnesses and benchmark drivers, not shipped in the binary (they
#                           start processes and read files by design);
#   -exclude-dir=third_party bbolt as released, whose findings are its design (pages read through
#                           unsafe pointers into its mmap), plus journal.patch, whose only ones are
#                           the same (G103: a page as bytes; third_party/bbolt/JOURNAL.md);
#   -exclude=G115           integer conversions: token counts, sizes and sequence numbers are
#                           bounded by the request limits (16 MiB messages, 32-bit counts in the
#                           API) long before they could overflow the narrower type.
# Every other finding is fixed or carries a "#nosec Gxxx -- why" at its line.
GOSEC := github.com/securego/gosec/v2/cmd/gosec@v2.30.0

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	go vet ./...
	go mod tidy -diff
	go run $(GOSEC) -quiet -exclude-generated -exclude-dir=test -exclude-dir=bench -exclude-dir=third_party -exclude=G115 ./...

# The test command of the README: starts Redis and NATS when they are not running, then runs
# every test with the race detector.
test:
	./scripts/ensure-backends.sh
	go test -race -count=1 -timeout 30m ./...

test-short:
	go test -short -count=1 ./...

bench:
	go test -run '^$$' -bench . -benchmem ./...

serve: build
	./bin/hermes serve
