import type { DescService } from "@bufbuild/protobuf";
import { ServerInterceptingCall, type ServerInterceptor } from "@grpc/grpc-js";
import { toClientError, toGrpcStatus } from "./error-table.js";
import { recordRpc } from "./rpc-metrics.js";
import type { HandlerDeps as Deps } from "./server-options.js";

/**
 * A grpc-js server interceptor that checks the bearer token as the call's
 * metadata arrives, before grpc-js reads (and decompresses) the request
 * message: a caller without a good token is answered UNAUTHENTICATED and
 * its body is never read. Only the given service's methods are gated;
 * health and reflection stay open. The handlers still ask the
 * authenticator for the namespace (cheap next to the call), so they keep
 * working without this gate.
 */
export function grpcAuthGate(deps: Deps, service: DescService): ServerInterceptor {
  const prefix = `/${service.typeName}/`;
  return (method, call) => {
    if (!method.path.startsWith(prefix)) return new ServerInterceptingCall(call);
    const gated: ServerInterceptingCall = new ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata(metadata, passOn) {
            const [authorization] = metadata.get("authorization");
            try {
              deps.authenticator.namespaceOf(
                typeof authorization === "string" ? authorization : undefined,
              );
            } catch (err) {
              const clientError = toClientError(err, {
                method: method.path.slice(1),
                logger: deps.logger,
              });
              const name = method.path.slice(prefix.length);
              recordRpc(deps.metrics, "grpc", name, clientError.code, undefined);
              // Not passing the metadata on: the handler never starts, so
              // nothing asks grpc-js to read the message.
              gated.sendStatus(toGrpcStatus(clientError));
              return;
            }
            passOn(metadata);
          },
        });
      },
    });
    return gated;
  };
}
