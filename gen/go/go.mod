module github.com/windlass-ai/windlass-memory/gen/go

// The oldest Go and grpc-go this code needs: range-over-func iterators in the
// client library (clients/go) need Go 1.23, and grpc-go v1.75.1 is the newest
// grpc-go that still builds with it (the generated code needs v1.64.0 or
// later). Applications built with a newer grpc-go select it as usual.
go 1.23.0

require (
	google.golang.org/grpc v1.75.1
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/sys v0.33.0 // indirect
	golang.org/x/text v0.26.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250707201910-8d1bb00bc6a7 // indirect
)
