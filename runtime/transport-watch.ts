/**
 * Whether this node's transporter connection stands right now. Moleculer's NATS transporter (nats.js 2) reconnects by
 * itself but does not track a lost connection: a request sent meanwhile is buffered or lost and the caller waits the
 * whole requestTimeout (30 s) for a 504. The gateway asks `assertConnected()` before every call and answers 503 with
 * Retry-After at once; requests to other nodes in flight when the connection drops are rejected the same way (their
 * answers may never come; a write among them may still have committed, as with any request whose answer is lost).
 */
import type { ServiceBroker } from "moleculer";
import { ApiError } from "../lib/errors";

/** Seconds a client is told to wait: nats.js retries every 2 s (plus jitter). */
const TRANSPORT_RETRY_AFTER_S = 2;
const POLL_MS = 200;
/**
 * After this node is back, the others may still be reconnecting (nats.js waits 2 s between attempts): a request sent
 * to a node not yet subscribed is dropped by NATS and would wait out requestTimeout. 503 a little longer instead.
 */
const RECONNECT_SETTLE_MS = 2500;
/** While down, calls to other nodes made meanwhile are failed this often. */
const SWEEP_MS = 100;

/**
 * Liveness of the NATS connections (the transporter's, the event stream's): nats.js pings the server every
 * `pingInterval` and gives the connection up after `maxPingOut` unanswered pings, then reconnects. With its defaults
 * (every 2 minutes) a connection that went silent without closing (a partition without resets) was noticed only after
 * 4 to 6 minutes, every request answering 503 meanwhile; now within 4 to 6 s. A connect attempt that gets no answer
 * within `timeout` is abandoned for the next one (default 20 s).
 */
export const NATS_LIVENESS = { pingInterval: 2000, maxPingOut: 2, timeout: 5000 } as const;

/** Moleculer's `transporter` option for TRANSPORTER: a NATS URL with the liveness settings; anything else as given. */
export function transporterOption(url: string | undefined): string | { type: "NATS"; options: Record<string, unknown> } | null {
	if (!url) return null;
	return /^nats:\/\//i.test(url.trim()) ? { type: "NATS", options: { url, ...NATS_LIVENESS } } : url;
}

export function transportUnavailable(): ApiError {
	const err = new ApiError(503, "service unavailable");
	err.data = { retryAfter: TRANSPORT_RETRY_AFTER_S };
	return err;
}

type NatsStatus = { type: string };
type NatsLike = { status(): AsyncIterable<NatsStatus>; isClosed?(): boolean };
type TransitLike = { connected?: boolean; tx?: { client?: unknown }; pendingRequests?: Map<string, { nodeID?: string; reject(err: Error): void }> };

export class TransportWatch {
	private up = true;
	private stopped = false;
	private settle?: NodeJS.Timeout;
	private sweeper?: NodeJS.Timeout;

	constructor(private readonly broker: ServiceBroker) {}

	get connected(): boolean {
		return this.up;
	}

	assertConnected(): void {
		if (!this.up) throw transportUnavailable();
	}

	/** Follows the NATS client's status once it exists; a node without a transporter is always connected. */
	start(): void {
		if (!this.broker.transit) return;
		void this.follow();
	}

	stop(): void {
		this.stopped = true;
		clearTimeout(this.settle);
		clearInterval(this.sweeper);
	}

	private async follow(): Promise<void> {
		const transit = this.broker.transit as unknown as TransitLike;
		let client: NatsLike | undefined;
		// The client exists once the transporter connected; connected without one: another transporter, not watched.
		while (!this.stopped && !(client = natsClient(transit)) && !transit.connected) await new Promise((r) => setTimeout(r, POLL_MS).unref());
		if (!client || this.stopped) return;
		for await (const s of client.status()) {
			if (this.stopped) return;
			if (s.type === "disconnect") {
				clearTimeout(this.settle);
				this.up = false;
				// Also the calls made after this moment by requests that had passed the gate (authentication's own
				// calls): nats.js would buffer them and its reconnect may not deliver them.
				this.rejectInFlight(transit);
				this.sweeper ??= setInterval(() => this.rejectInFlight(transit), SWEEP_MS);
				this.sweeper.unref();
			} else if (s.type === "reconnect") {
				clearTimeout(this.settle);
				this.settle = setTimeout(() => this.back(), RECONNECT_SETTLE_MS);
				this.settle.unref();
			}
		}
	}

	private back(): void {
		this.up = true;
		clearInterval(this.sweeper);
		this.sweeper = undefined;
	}

	private rejectInFlight(transit: TransitLike): void {
		for (const [id, req] of transit.pendingRequests ?? []) {
			transit.pendingRequests!.delete(id);
			req.reject(transportUnavailable());
		}
	}
}

/** The nats.js 2 connection of Moleculer's NATS transporter (other transporters: none, not watched). */
function natsClient(transit: TransitLike): NatsLike | undefined {
	const c = transit.tx?.client as Partial<NatsLike> | undefined;
	return c && typeof c.status === "function" ? (c as NatsLike) : undefined;
}
