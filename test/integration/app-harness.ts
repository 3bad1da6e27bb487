import { type App, startApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { silentLogger } from "../../src/logger.js";
import { type FakeLlm, startFakeLlm } from "../support/fake-llm.js";
import { connectDriver, type Driver, grpcDriver } from "./drivers.js";

/** The whole server as `windlass-memory serve` builds it, on free ports, with a fake model. */
export interface AppHarness {
  app: App;
  llm: FakeLlm;
  close(): Promise<void>;
}

/** Starts the app from flags and environment, exactly as the command would read them. */
export async function startAppHarness(
  flags: string[] = [],
  env: Record<string, string> = {},
): Promise<AppHarness> {
  const llm = await startFakeLlm();
  const config = loadConfig(
    [
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--http-port",
      "0",
      "--openai-base-url",
      llm.baseUrl,
      "--openai-max-retries",
      "0",
      ...flags,
    ],
    env,
  );
  const app = await startApp(config, silentLogger);
  return {
    app,
    llm,
    async close() {
      await app.stop();
      await llm.close();
    },
  };
}

export type DriverFactory = [string, (app: App, token?: string) => Driver];

/** Every transport a client can use; each integration case runs through all of them. */
export const DRIVERS: DriverFactory[] = [
  ["grpc", (app, token) => grpcDriver(app.grpcPort, token)],
  ["connect-json-http1", (app, token) => connectDriver(app.httpPort, "connect", "1.1", token)],
  ["grpc-web-http2", (app, token) => connectDriver(app.httpPort, "grpc-web", "2", token)],
  ["grpc-on-connect-port", (app, token) => connectDriver(app.httpPort, "grpc", "2", token)],
];
