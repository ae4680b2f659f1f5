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

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	go vet ./...
	go mod tidy -diff

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
