/**
 * A stopping gateway's HTTP connections. `server.close()` (moleculer-web's `stopped`) waits for every connection to
 * end, and a keep-alive connection that receives a new request before it is idle never is: under steady load (clients
 * that reuse their connections, as fetch and every HTTP library do) the stop waited forever while the gateway kept
 * answering. From the moment the node stops (NODE_STOPPING): idle connections are closed, every response carries
 * `Connection: close` so its connection ends once it is sent (the client opens a new one, refused or sent to another
 * gateway), and whatever is still open after the tracking's shutdown timeout plus a second (a request that never ends)
 * is closed.
 */
import type { Server } from "http";

const LAST_MS = 1000;

export class Drain {
	draining = false;

	constructor(
		private server: Server | undefined,
		private timeoutMs: number,
	) {}

	start(): void {
		if (this.draining || !this.server) return;
		this.draining = true;
		this.server.closeIdleConnections();
		const timer = setTimeout(() => this.server?.closeAllConnections(), this.timeoutMs + LAST_MS).unref();
		this.server.once("close", () => clearTimeout(timer));
	}
}
