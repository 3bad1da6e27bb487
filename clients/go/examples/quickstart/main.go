// Quickstart: store a conversation with a tool call, read it back, list the
// threads, see what an error looks like, and clear the thread.
//
//	go run ./examples/quickstart -target 127.0.0.1:50051
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	memory "github.com/windlass-ai/windlass-memory/clients/go"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "the server's gRPC address")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := memory.Dial(*target, memory.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	const thread = "go-quickstart"
	// A new thread keeps its strategy: here, a window of the newest 20 messages.
	added, err := c.AddWith(ctx, thread, []*memory.Message{
		memory.System("You are a helpful assistant."),
		memory.User("What is the weather in Paris?"),
		memory.Assistant("", memory.Call("call-1", "get_weather", `{"city":"Paris"}`)),
		memory.ToolResult("call-1", "18 degrees, sunny"),
		memory.Assistant("It is 18 degrees and sunny in Paris."),
	}, memory.WithStrategy(memory.Window(20)))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored seqs %d..%d\n", added.GetFirstSeq(), added.GetLastSeq())

	got, err := c.Get(ctx, thread)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range got.GetMessages() {
		fmt.Printf("%d %s: %q", m.GetSeq(), m.GetRole(), m.GetContent())
		for _, c := range m.GetToolCalls() {
			fmt.Printf(" call %s %s(%s)", c.GetId(), c.GetName(), c.GetArguments())
		}
		fmt.Println()
	}

	for id, err := range c.Threads(ctx, 100) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("thread:", id)
	}

	// Errors are gRPC statuses: the helpers (or status.Code) tell them apart.
	_, err = c.AddWith(ctx, thread, []*memory.Message{memory.User("hi")},
		memory.WithStrategy(memory.Summary()))
	if memory.IsStrategyConflict(err) {
		fmt.Println("refused:", memory.Code(err), err)
	} else {
		log.Fatalf("expected a strategy conflict, got %v", err)
	}

	cleared, err := c.Clear(ctx, thread)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cleared threads:", cleared)
}
