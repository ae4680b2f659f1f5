module go.etcd.io/bbolt

go 1.25.0

require golang.org/x/sys v0.50.0
