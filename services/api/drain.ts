/**
 * A stopping gateway's HTTP connections. From the moment the node stops (NODE_STOPPING) the gateway takes no new
 * connection (its listener closes: a proxy in front sends the request to another gateway), closes its idle ones, and
 * answers every request it still gets on an open one with `Connection: close`, so that connection ends once the answer
 * is sent: a keep-alive client that keeps its connection busy, as fetch and every HTTP library do under load, does not
 * hold the stop. The gateway's `stopped` waits for the last connection to end (`closed()`), the answers to the
 * requests in flight included; whatever is still open after the tracking's shutdown timeout plus a second (a request
 * that never ends) is closed.
 */
import type { Server } from "http";

const LAST_MS = 1000;

export class Drain {
	draining = false;
	private done?: Promise<void>;

	constructor(
		private server: Server | undefined,
		private timeoutMs: number,
	) {}

	start(): void {
		if (this.draining || !this.server) return;
		this.draining = true;
		const server = this.server;
		const timer = setTimeout(() => server.closeAllConnections(), this.timeoutMs + LAST_MS).unref();
		this.done = new Promise((resolve) => {
			const ended = () => {
				clearTimeout(timer);
				resolve();
			};
			if (server.listening) server.close(ended);
			else ended();
		});
		server.closeIdleConnections();
	}

	/** Resolves once every connection of the draining server has ended (at once when it never listened). */
	closed(): Promise<void> {
		return this.done ?? Promise.resolve();
	}
}
