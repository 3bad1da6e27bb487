module github.com/windlass-ai/windlass-memory/clients/go

// Go 1.23: Watch and Threads return range-over-func iterators (iter.Seq2).
go 1.23.0

require (
	github.com/windlass-ai/windlass-memory/gen/go v0.0.0
	google.golang.org/grpc v1.75.1
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/sys v0.33.0 // indirect
	golang.org/x/text v0.26.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250707201910-8d1bb00bc6a7 // indirect
)

// The generated stubs of this repository, not a published version.
replace github.com/windlass-ai/windlass-memory/gen/go => ../../gen/go
