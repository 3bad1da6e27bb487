import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/**
 * A scripted OpenAI-compatible model for the bench: POST
 * /v1/chat/completions answers, after a fixed delay, with a short summary
 * that names how long the prompt was. It runs on 127.0.0.1 (a free port)
 * and keeps only counters, so it holds no memory however long the run.
 */
export interface ModelServer {
  /** "http://127.0.0.1:PORT/v1", as the server's --openai-base-url. */
  readonly baseUrl: string;
  /** Completion requests received so far. */
  readonly requested: number;
  /** Completions answered so far. */
  readonly answered: number;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 8 * 1024 * 1024;

export async function startModelServer(delayMs: number): Promise<ModelServer> {
  let requested = 0;
  let answered = 0;
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== "POST" || !req.url?.endsWith("/chat/completions")) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end('{"error":{"message":"not found"}}');
      return;
    }
    let bytes = 0;
    req.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > MAX_BODY_BYTES) req.destroy();
    });
    req.on("end", () => {
      requested++;
      const timer = setTimeout(() => {
        timers.delete(timer);
        answered++;
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            id: `bench-${answered}`,
            object: "chat.completion",
            created: Math.floor(Date.now() / 1000),
            model: "bench-scripted",
            choices: [
              {
                index: 0,
                message: {
                  role: "assistant",
                  content: `Summary ${answered}: the conversation so far (${bytes} bytes of prompt).`,
                },
                finish_reason: "stop",
              },
            ],
          }),
        );
      }, delayMs);
      timers.add(timer);
    });
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    get requested() {
      return requested;
    },
    get answered() {
      return answered;
    },
    async close() {
      for (const t of timers) clearTimeout(t);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
