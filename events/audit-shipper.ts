/**
 * The gateway's side of durable request audit: entries wait in a bounded in-memory buffer and leave in batches for
 * the durable path of the node's EVENT_STREAM (the `platform.audit` channel of JetStream / Redis Streams, or the
 * embedded spool beside the outbox), off the request path. A batch is acknowledged by the stream (JetStream's
 * publish ack, XADD's answer, the spool's insert) before it leaves the buffer; a failure keeps it and retries with a
 * backoff, so a stream outage delays entries and never fails a request.
 *
 * The window (docs/decisions.md, "Request audit"): an entry still buffered here when this process dies (SIGKILL,
 * OOM) is lost: at most the entries of the last tens of milliseconds, or of the whole outage while the stream is
 * down. Awaiting the stream before answering would close it at the cost of a round trip per request.
 */
import { AsyncResource } from "async_hooks";
import { randomBytes } from "crypto";
import type { ServiceBroker } from "moleculer";
import { configOf, type PlatformConfig } from "../runtime/config";
import { auditEntry, type AuditedReq, type AuditRequest } from "../lib/audit";
import { AUDIT_CHANNEL, channelsStreamFor } from "./channels.stream";
import { sharedAuditSpool, type AuditBatch } from "./audit-spool";

export interface ShipperOptions {
	/**
	 * How long entries wait for company: the first entry after a send waits this long, so batches leave at most once
	 * per flushMs (or sooner when full). Under load a batch carries flushMs of requests, not the few that arrived during
	 * the previous send: one statement per batch instead of one per handful of requests.
	 */
	flushMs: number;
	/** Entries per batch: a JetStream message stays far below NATS's 1 MiB payload limit. */
	maxBatch: number;
	/** Entries kept while the stream is away; beyond, the oldest tenth is dropped (counted and logged). */
	maxBuffered: number;
	/** Longest pause between attempts while the stream fails. */
	maxBackoffMs: number;
	warn(msg: string): void;
}

export const SHIPPER_DEFAULTS = { flushMs: 50, maxBatch: 200, maxBuffered: 100_000, maxBackoffMs: 5000 };

export type AuditSink = (batch: AuditBatch) => Promise<void>;

export class AuditShipper {
	private buf: AuditRequest[] = [];
	/** The batch being sent, kept with its id until the stream took it (a retry is de-duplicated by that id). */
	private current?: AuditBatch;
	private timer?: NodeJS.Timeout;
	private running?: Promise<void>;
	private failures = 0;
	private closed = false;
	/** Set by close: the buffer is sent batch after batch, without waiting for company. */
	private closing = false;
	/** Timers run in the scope the shipper was made in, never in a request's (its unit of work, its context). */
	private readonly scope = new AsyncResource("audit-shipper");
	/** Entries the stream acknowledged, and entries dropped because the buffer was full. */
	shipped = 0;
	dropped = 0;

	constructor(
		private readonly sink: AuditSink,
		private readonly opts: ShipperOptions,
	) {}

	/** O(1) on the request path: a push, at most one timer. */
	push(entry: AuditRequest): void {
		if (this.closed) return;
		if (this.buf.length >= this.opts.maxBuffered) {
			const n = Math.max(1, Math.floor(this.opts.maxBuffered / 10));
			this.buf.splice(0, n);
			this.dropped += n;
			this.opts.warn(`audit buffer full (${this.opts.maxBuffered} entries, event stream unreachable): ${n} oldest entries dropped, ${this.dropped} so far`);
		}
		this.buf.push(entry);
		if (!this.running && !this.timer)
			this.timer = setTimeout(
				this.scope.bind(() => this.kick()),
				this.opts.flushMs,
			);
	}

	/** Entries not yet acknowledged by the stream. */
	get pending(): number {
		return this.buf.length + (this.current?.entries.length ?? 0);
	}

	private kick(): void {
		this.timer = undefined;
		this.running ??= this.drain().finally(() => {
			this.running = undefined;
			// What arrived during the last send waits flushMs for company (its push armed no timer while sending).
			if (this.buf.length && !this.timer && !this.closing)
				this.timer = setTimeout(
					this.scope.bind(() => this.kick()),
					this.opts.flushMs,
				);
		});
	}

	/**
	 * Sends the batch in hand (retrying it until the stream takes it), then the following ones while full batches wait;
	 * a partial one waits for the next kick. Closing sends everything.
	 */
	private async drain(): Promise<void> {
		for (let first = true; this.current || (this.buf.length && (first || this.closing || this.buf.length >= this.opts.maxBatch)); first = false) {
			this.current ??= { id: randomBytes(12).toString("hex"), entries: this.buf.splice(0, this.opts.maxBatch) };
			try {
				await this.sink(this.current);
				this.shipped += this.current.entries.length;
				this.current = undefined;
				this.failures = 0;
			} catch (err) {
				this.failures++;
				if (this.failures === 1 || this.failures % 50 === 0)
					this.opts.warn(`audit entries not yet stored in the event stream (${(err as Error)?.message ?? err}); ${this.pending} waiting, retrying`);
				if (this.closed) return;
				await new Promise((r) => setTimeout(r, Math.min(this.opts.maxBackoffMs, 50 * 2 ** Math.min(this.failures, 10))));
			}
		}
	}

	/** Sends what is buffered (the gateway stops), waiting at most `timeoutMs`; returns the entries left unsent. */
	async close(timeoutMs = 5000): Promise<number> {
		this.closing = true;
		if (this.timer) clearTimeout(this.timer);
		this.timer = undefined;
		const deadline = Date.now() + timeoutMs;
		while (this.pending && Date.now() < deadline) {
			this.kick();
			let t: NodeJS.Timeout | undefined;
			await Promise.race([this.running, new Promise((r) => (t = setTimeout(r, Math.max(0, deadline - Date.now()))))]);
			clearTimeout(t);
		}
		this.closed = true;
		if (this.pending) this.opts.warn(`gateway stopping: ${this.pending} audit entries could not be stored in the event stream`);
		return this.pending;
	}
}

/** The sink of a node's EVENT_STREAM: the audit channel of the production stream, else the embedded spool. */
export function auditSink(cfg: PlatformConfig): { sink: AuditSink; release(): Promise<void> } {
	if (cfg.eventStream === "nats" || cfg.eventStream === "redis") {
		const stream = channelsStreamFor(cfg);
		return { sink: (b) => stream.publishTo(AUDIT_CHANNEL, b, `audit-${b.id}`), release: async () => undefined };
	}
	const spool = sharedAuditSpool(cfg);
	spool.connect().catch(() => undefined);
	return { sink: (b) => spool.append(b), release: () => spool.disconnect() };
}

const shippers = new WeakMap<ServiceBroker, AuditShipper>();

/** The shipper of a gateway's broker (emitAudit finds it here); made by the gateway service when it starts. */
export function attachShipper(broker: ServiceBroker, shipper: AuditShipper): void {
	shippers.set(broker, shipper);
}

export function shipperOf(broker: ServiceBroker): AuditShipper | undefined {
	return shippers.get(broker);
}

/** A gateway's shipper on its node's stream, registered for emitAudit; `stop` sends what is left and releases it. */
export function startShipper(broker: ServiceBroker, warn: (msg: string) => void): { shipper: AuditShipper; stop(): Promise<void> } {
	const cfg = configOf(broker);
	const { sink, release } = auditSink(cfg);
	const shipper = new AuditShipper(sink, { ...SHIPPER_DEFAULTS, warn });
	attachShipper(broker, shipper);
	return {
		shipper,
		async stop() {
			await shipper.close();
			shippers.delete(broker);
			await release().catch(() => undefined);
		},
	};
}

/** Hands the request's audit entry to the node's shipper (never throws, never waits). */
export function emitAudit(broker: ServiceBroker, req: AuditedReq, status: number, data?: unknown, ipOf?: () => string): void {
	try {
		const entry = auditEntry(req, status, data, ipOf);
		if (entry) shipperOf(broker)?.push(entry);
	} catch {
		/* auditing never breaks a response */
	}
}
