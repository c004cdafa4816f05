/**
 * Tells the node's own services that it is stopping, before the broker waits for the requests it holds (tracking's
 * shutdown timeout) and before any service's `stopped`: a service holding requests that only end when it lets them
 * (the gateway's live cursors) ends them on this local event, so the stop does not wait out the timeout.
 */
import type { Middleware, ServiceBroker } from "moleculer";

export const NODE_STOPPING = "$platform.stopping";

export const NodeStoppingMiddleware = {
	name: "NodeStopping",
	stopping(broker: ServiceBroker) {
		return broker.broadcastLocal(NODE_STOPPING);
	},
} as unknown as Middleware;
