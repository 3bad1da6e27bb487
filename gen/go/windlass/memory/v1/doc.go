// Package memoryv1 is the generated Go code for the windlass.memory.v1
// protobuf package: the messages of proto/windlass/memory/v1/memory.proto and
// the gRPC client and server of MemoryService.
//
// The proto is the reference manual; every message and field is documented
// there and in the generated code. Connect to a server with grpc-go:
//
//	conn, err := grpc.NewClient("127.0.0.1:50051",
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//	if err != nil {
//		return err
//	}
//	defer conn.Close()
//	memory := memoryv1.NewMemoryServiceClient(conn)
//	_, err = memory.Add(ctx, &memoryv1.AddRequest{
//		ThreadId: "t1",
//		Messages: []*memoryv1.ChatMessage{{Role: memoryv1.Role_ROLE_USER, Content: "hello"}},
//	})
//
// Everything except this file is written by scripts/generate.sh (buf with
// protoc-gen-go and protoc-gen-go-grpc); do not edit it by hand.
package memoryv1
