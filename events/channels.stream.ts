/**
 * The production change stream (EVENT_STREAM=nats|redis): @moleculer/channels with its NATS JetStream or Redis
 * Streams adapter, on the channel `<namespace>.platform.changes`, fed by the relay (events/relay.ts) with the
 * outbox records in seq order. A second channel, `<namespace>.platform.audit`, carries the gateways' request audit
 * entries in batches (events/audit-shipper.ts) to the logger, with the same limits and the same contract.
 *
 * Wiring. The channels middleware is added to the broker (moleculer.config.ts) only when EVENT_STREAM is not
 * `outbox`; this class wraps it, keeps its adapter (`broker.channelAdapter`) and registers consumer groups
 * dynamically: the workers ask for their group at run time (worker base `started`), not through a `channels:` schema
 * property, once the adapter is connected (the middleware connects in its own `started` hook, after the services'
 * ones, so earlier requests wait for it). Redis groups go through `adapter.subscribe(chan)`; NATS groups are pull
 * consumers of this class (below) whose messages the adapter's own handler takes (acknowledgement, retries, dead
 * letter), as with its push subscriptions.
 * The relay publishes with `adapter.publish`, which passes JetStream / XADD options through (`msgID`, `xaddMaxLen`).
 *
 * Contract: each consumer group (the worker's name) gets every event at least once, and the instances of a group
 * share its events. The adapter acknowledges after the handler succeeded; a handler that throws gets the event
 * again (NATS: after a backoff held here, then a NAK; Redis: claimed again after the ack wait), up to
 * STREAM_MAX_RETRIES deliveries, after which the event moves to the dead-letter stream
 * `<namespace>.platform.changes.failed` (never dropped silently). Consumers de-duplicate nothing: after a crash, a
 * restart, a relay take-over or a retry an event may come twice, so handlers are idempotent (or key on `seq`).
 *
 * The pitfalls of the stock settings, and what is done about each:
 * - NATS consumers start at `deliver_policy: new`: groups are created with `all`, so a group that did not exist when
 *   events were published (a new worker kind, a first start) still reads everything the stream retains.
 * - NATS streams keep acknowledged messages forever: the stream has a max age (STREAM_RETENTION_HOURS) and count
 *   (STREAM_MAX_MESSAGES); Redis streams are capped with XADD MAXLEN ~ (count only).
 * - `ack_wait` is 30 s (NATS) and Redis `minIdleTime` 1 h: both are STREAM_ACK_WAIT_MS (10 s / 30 s), so a crashed
 *   consumer's events go to another instance within seconds; a NATS handler that runs longer keeps its event by
 *   signalling progress (`working()`) every third of it. Redis has no such signal: a handler running longer than
 *   the ack wait may see its event handled a second time elsewhere.
 * - NATS `maxInFlight` is the whole group's `max_ack_pending`, Redis's a count per instance. STREAM_MAX_IN_FLIGHT
 *   defaults to 1: one event of a group at a time, in stream order, as the embedded stream does, which the workers'
 *   per-document order relies on (the dispatcher queues a document's deliveries in the order it sees them). The
 *   instances of a group still share the events, taking turns; raise it (or pass `maxInFlight` to `consume`) for a
 *   group that tolerates reordering. Existing NATS groups are updated to the configured value.
 * - Redis: the stock unsubscribe deletes the consumer (XGROUP DELCONSUMER) and with it the events it failed and
 *   still holds for a retry; here a stopping consumer is deleted only when it holds none.
 * - The NATS adapter reads a URL only from `nats.url` (not the string form), and gives up reconnecting after 10
 *   attempts by default: the servers are set explicitly, reconnecting forever.
 * - The NATS adapter makes each group a push consumer whose instances share one deliver subject as a queue group.
 *   The NATS server keeps a connection nobody told it is gone (a NAT or load balancer that forgot it), with its
 *   subscriptions, until its own pings drop it (2 to 6 minutes by default), and went on handing that dead member its
 *   share of the group's events, each lost until `ack_wait`: a group taking one event at a time all but stopped while
 *   the node was connected again. Groups are pull consumers instead: each instance asks for events (requests that
 *   expire after PULL_EXPIRES_MS, asked again at once), and an event answering a request of the lost connection goes to
 *   the request's inbox, to which the client subscribed again on its new connection. A push group of an earlier
 *   version becomes a pull group from its acknowledgement floor (the events acknowledged out of order beyond it come
 *   once more).
 *
 * Its parts: the settings and the adapter's configuration (channels-options.ts), the adapter as this code uses it
 * (channels-adapter.ts), JetStream's streams and pull groups (channels-jetstream.ts), Redis' group stop
 * (channels-redis.ts), the waits after a failed event (channels-retry.ts).
 */
import type { Middleware, ServiceBroker } from "moleculer";
import { Middleware as ChannelsMiddleware } from "@moleculer/channels";
import type { PlatformConfig } from "../runtime/config";
import { HEALTH_ACTION, HEALTH_TIMED_OUT, pipelineHealth, trackProgress, withEntries, withTimeout, type Health, type Progress } from "../runtime/health";
import type { OutboxRecord } from "./outbox";
import { DEFAULT_BATCH, type BatchHandler, type BatchOptions, type ChangeHandler, type ChangeStream, type ConsumeOptions, type Consumer } from "./stream";
import {
	streamNameOf,
	subjectOf,
	type AdapterChannel,
	type ChannelHandler,
	type ChannelHandlerWrapping,
	type ChannelsAdapter,
	type JsConsumerInfo,
	type NatsAdapter,
	type RawMessage,
	type RedisAdapter,
} from "./channels-adapter";
import { durableOf, ensureStream, pull, unsubscribeNats } from "./channels-jetstream";
import { adapterConfig, AUDIT_CHANNEL, channelsStreamOptions, streamLimits, type ChannelsStreamOptions } from "./channels-options";
import { unsubscribeRedis } from "./channels-redis";
import { isOutage, outageDelay, retryDelay } from "./channels-retry";

export { AUDIT_CHANNEL, CHANGES_CHANNEL, channelsStreamOptions, type ChannelsStreamOptions } from "./channels-options";
export { isOutage } from "./channels-retry";

/** A node's health check answers within this (the gateway waits SERVICE_HEALTH_MS for it), what it knows by then. */
const HEALTH_ANSWER_MS = 700;
/** How often the groups' lag is sampled (JetStream) and the pipeline gauges refreshed. */
const MONITOR_MS = 2000;
/** How long a stop waits for a group's handler in progress, or for the adapter's goodbye, before it goes on. */
export const STOP_WAIT_MS = 5000;

/** A consumer of any channel of the stream: one delivered message, acknowledged once it resolves. */
export type MessageHandler<T> = (msg: T) => Promise<void>;

interface Subscription {
	/** Channel before the namespace prefix (the changes, or the audit entries). */
	channel: string;
	group: string;
	handler: MessageHandler<unknown>;
	maxInFlight: number;
	position: number;
	stopped: boolean;
	/** The adapter's channel object of the current subscription. */
	chan?: AdapterChannel;
	/** The subscribe loop (retries until it succeeds or the consumer stops). */
	running?: Promise<void>;
	wakers: Set<() => void>;
	/** Whether it moves (/status, `platform_pipeline_stalled`), and the last ack floor of its JetStream group seen. */
	progress: Progress;
	floor?: number;
	/** Handlers of this instance in progress. */
	inFlight: number;
}

/** An event's outbox position, when the message is an outbox record (the audit channel's batches have none). */
function seqOf(rec: unknown): number | undefined {
	return (rec as { seq?: number } | null | undefined)?.seq;
}

export class ChannelsStream implements ChangeStream {
	readonly kind: "nats" | "redis";
	private broker?: ServiceBroker;
	private adapter?: ChannelsAdapter;
	private connected = false;
	private readyWaiters: Array<() => void> = [];
	private subs = new Set<Subscription>();
	private counter = 0;
	private monitor?: NodeJS.Timeout;

	/** `owner`: the node's configuration object, under which its groups' progress is reported (runtime/health.ts). */
	constructor(
		readonly opts: ChannelsStreamOptions,
		private readonly owner: object = opts,
	) {
		this.kind = opts.kind;
	}

	/** The channel as published and consumed (`<namespace>.platform.changes`); known once a broker is attached. */
	get subject(): string {
		return this.subjectOf(this.opts.channel);
	}

	/** The NATS stream holding the channel (the adapter's naming: dots become underscores). */
	get streamName(): string {
		return this.streamNameOf(this.opts.channel);
	}

	private subjectOf(channel: string): string {
		return subjectOf(this.adapter, channel);
	}

	private streamNameOf(channel: string): string {
		return streamNameOf(this.adapter, channel);
	}

	/** The adapter as the NATS one (EVENT_STREAM=nats). */
	private get nats(): NatsAdapter {
		return this.adapter as NatsAdapter;
	}

	/** The adapter as the Redis one (EVENT_STREAM=redis). */
	private get redis(): RedisAdapter {
		return this.adapter as RedisAdapter;
	}

	/** The channels middleware for the broker this stream runs on (moleculer.config.ts adds it). */
	middleware(): Middleware {
		const inner = ChannelsMiddleware({ adapter: adapterConfig(this.opts), context: false } as unknown as Parameters<typeof ChannelsMiddleware>[0]);
		// eslint-disable-next-line @typescript-eslint/no-this-alias
		const self = this;
		return {
			...inner,
			name: "Channels",
			created(broker: ServiceBroker) {
				inner.created(broker);
				self.attach(broker, (broker as unknown as { channelAdapter: unknown }).channelAdapter);
			},
			async started() {
				await inner.started();
				await self.onConnected();
			},
			async stopped() {
				await self.close();
				self.connected = false;
				// A NATS connection already closed (lost) has nothing to drain: the adapter would only log an error.
				if (self.kind === "nats" && self.adapter && self.nats.connection?.isClosed?.()) self.adapter.connected = false;
				else if (
					(await withTimeout(
						inner.stopped().then(() => true),
						STOP_WAIT_MS,
					)) === undefined
				) {
					// The server does not answer the drain (a silent connection): close without it.
					self.logger?.warn(`event stream: no answer to the disconnect within ${STOP_WAIT_MS} ms; closing the connection`);
					if (self.kind === "nats") await (self.adapter && self.nats.connection?.close?.().catch(() => undefined));
					else for (const c of (self.adapter && self.redis.clients?.values?.()) ?? []) c.disconnect?.();
					if (self.adapter) self.adapter.connected = false;
				}
			},
			// Every local health check (domains, workers) also reports this node's stalled pipeline stages: the relay,
			// the consumer groups (a stage that moves adds nothing). It answers within HEALTH_ANSWER_MS, also when a
			// dependency's check hangs, so that the gateway (which waits SERVICE_HEALTH_MS) still learns the stages' reasons.
			localAction(next: (ctx: unknown) => Promise<Health>, action: { name?: string }) {
				if (!String(action?.name ?? "").endsWith(`.${HEALTH_ACTION}`)) return next;
				return async (ctx: unknown) => {
					const h = (await withTimeout(next(ctx), HEALTH_ANSWER_MS)) ?? HEALTH_TIMED_OUT;
					return self.broker && h?.info ? withEntries(h, pipelineHealth(self.broker, self.owner)) : h;
				};
			},
		} as unknown as Middleware;
	}

	private attach(broker: ServiceBroker, adapter: unknown): void {
		this.broker = broker;
		this.adapter = adapter as ChannelsAdapter;
		this.connected = false;
	}

	private get logger() {
		return this.broker?.getLogger("event-stream");
	}

	private async onConnected(): Promise<void> {
		if (this.kind === "nats") for (const channel of [this.opts.channel, AUDIT_CHANNEL]) await this.ensureStream(channel);
		this.connected = true;
		this.watchGroups();
		for (const w of this.readyWaiters.splice(0)) w();
		// Groups asked for before the adapter connected (the workers' `started` hooks run before the middleware's).
		await Promise.all([...this.subs].filter((s) => !s.running).map((s) => this.startSubscription(s)));
	}

	/** True while the adapter is connected and not stopping. */
	isConnected(): boolean {
		return this.connected && !!this.adapter?.connected && !this.adapter?.stopping;
	}

	/** Resolves once connected (or at once when already connected). */
	whenConnected(): Promise<void> {
		if (this.isConnected()) return Promise.resolve();
		return new Promise((resolve) => this.readyWaiters.push(resolve));
	}

	private ensureStream(channel: string): Promise<void> {
		return ensureStream(this.nats, channel, streamLimits(this.opts));
	}

	consume(group: string, handler: ChangeHandler, opts: ConsumeOptions = {}): Promise<Consumer> {
		return this.consumeChannel(this.opts.channel, group, handler, opts);
	}

	/** A consumer group on another channel of the stream (the audit entries), with the same contract as `consume`. */
	async consumeChannel<T>(channel: string, group: string, handler: MessageHandler<T>, opts: ConsumeOptions = {}): Promise<Consumer> {
		if (!this.broker || !this.adapter) throw new Error(`EVENT_STREAM=${this.kind}: the stream is not attached to a broker (the channels middleware of moleculer.config.ts)`);
		const sub: Subscription = {
			channel,
			group,
			// Each group's messages are its channel's (T): the subscription holds handlers of every channel.
			handler: handler as MessageHandler<unknown>,
			maxInFlight: Math.max(1, Math.round(opts.maxInFlight ?? this.opts.maxInFlight)),
			position: 0,
			stopped: false,
			wakers: new Set(),
			progress: trackProgress(this.owner, `${channel === this.opts.channel ? "event" : "audit"} group ${group}`),
			inFlight: 0,
		};
		this.subs.add(sub);
		this.watchGroups();
		if (this.connected) await this.startSubscription(sub);
		return { position: () => sub.position, stop: () => this.stopSubscription(sub) };
	}

	/**
	 * Batches of the events in flight at once: those the adapter hands over while a batch is being handled go together
	 * in the next one (at most `maxBatch`), in the order they arrived. Each event is acknowledged when its batch
	 * succeeded; a batch that throws fails each of its events, which come back one by one (retry, dead letter) as
	 * with `consume`. With maxInFlight 1 (the default: group order) a batch holds one event.
	 */
	consumeBatches(group: string, handler: BatchHandler, opts: BatchOptions = {}): Promise<Consumer> {
		const max = Math.max(1, Math.round(opts.maxBatch ?? DEFAULT_BATCH));
		const waiting: Array<{ rec: OutboxRecord; done: (err?: unknown) => void }> = [];
		let running = false;
		const drain = async () => {
			running = true;
			while (waiting.length) {
				const batch = waiting.splice(0, max);
				let failure: unknown;
				try {
					await handler(batch.map((w) => w.rec));
				} catch (err) {
					failure = err ?? new Error("batch failed");
				}
				for (const w of batch) w.done(failure);
			}
			running = false;
		};
		const one: ChangeHandler = (rec) =>
			new Promise<void>((resolve, reject) => {
				waiting.push({ rec, done: (err) => (err ? reject(err) : resolve()) });
				// The next turn of the event loop: the deliveries arriving together join one batch.
				if (!running && waiting.length === 1) setImmediate(() => void (running || drain()));
			});
		return this.consume(group, one, opts);
	}

	/** Subscribes, retrying in the background after a failure; resolves after the first attempt. */
	private startSubscription(sub: Subscription): Promise<void> {
		let first!: () => void;
		const attempted = new Promise<void>((r) => (first = r));
		sub.running = (async () => {
			for (let attempt = 0; !sub.stopped; attempt++) {
				try {
					await this.subscribeOnce(sub);
					first();
					return;
				} catch (err) {
					this.logger?.warn(`event stream: subscribing group ${sub.group} failed (${(err as Error).message}); retrying`);
					first();
					await this.pause(sub, Math.min(30_000, 1000 * 2 ** attempt));
				}
			}
			first();
		})();
		return attempted;
	}

	private async subscribeOnce(sub: Subscription): Promise<void> {
		const a = this.adapter!;
		// A fresh channel object and id per attempt: a failed attempt leaves its id registered in the adapter.
		const chan: AdapterChannel = {
			id: a.addPrefixTopic(`${this.broker!.nodeID}.${sub.group}.${++this.counter}`),
			name: this.subjectOf(sub.channel),
			group: sub.group,
			context: false,
			unsubscribing: false,
			maxInFlight: sub.maxInFlight,
			maxRetries: this.opts.maxRetries,
			deadLettering: { enabled: this.opts.deadLetter, queueName: `${sub.channel}.failed` },
			redis: { startID: "0", minIdleTime: this.opts.ackWaitMs, claimInterval: 1000 },
		};
		chan.handler = (this.broker!.middlewares as unknown as ChannelHandlerWrapping).wrapHandler("localChannel", this.handlerOf(sub), chan);
		sub.chan = chan;
		if (this.kind === "nats") await pull(this.nats, sub, chan, this.opts.ackWaitMs, streamLimits(this.opts), (m) => this.logger?.warn(m));
		else await this.redis.subscribe(chan);
	}

	private watchGroups(): void {
		this.monitor ??= setInterval(() => void this.watch(), MONITOR_MS);
		this.monitor.unref();
	}

	/**
	 * Every `MONITOR_MS`: whether each group moves. A group none of whose events wait, or whose JetStream ack floor
	 * moved, is current; one with events waiting and the floor still (or a handler held) stalls after STALL_MS.
	 * Redis Streams tell no lag here: an instance with no handler in progress counts as current. Then the gauges.
	 */
	private async watch(): Promise<void> {
		const jsm = this.kind === "nats" && this.isConnected() ? this.nats.manager : undefined;
		await Promise.all(
			[...this.subs].map(async (sub) => {
				if (this.kind === "redis") {
					if (!sub.inFlight) sub.progress.moved();
					return;
				}
				if (!jsm) return sub.progress.failed("event stream not connected");
				try {
					const info = await withTimeout<JsConsumerInfo>(jsm.consumers.info(this.streamNameOf(sub.channel), durableOf(sub.group)), MONITOR_MS);
					if (!info) return;
					const floor = Number(info.ack_floor?.stream_seq ?? 0);
					sub.progress.lag = Number(info.num_pending ?? 0) + Number(info.num_ack_pending ?? 0);
					if (!sub.progress.lag || (sub.floor !== undefined && floor !== sub.floor)) sub.progress.moved();
					sub.floor = floor;
				} catch (err) {
					sub.progress.failed(err);
				}
			}),
		);
		if (this.broker) pipelineHealth(this.broker, this.owner);
	}

	/**
	 * The group's handler for one event, tried again in place while it fails for an outage (isOutage) and the consumer
	 * runs: the event stays in progress (NATS: `working()` keeps it), spending no delivery. A stop ends the wait.
	 */
	private async handleHeld(sub: Subscription, rec: unknown): Promise<void> {
		for (let attempt = 0; ; attempt++) {
			try {
				return await sub.handler(rec);
			} catch (err) {
				if (!isOutage(err) || sub.stopped) throw err;
				sub.progress.failed(err);
				if (attempt % 20 === 0)
					this.logger?.warn(`event stream: group ${sub.group} waits for a dependency to handle ${seqOf(rec) ?? sub.channel} (${(err as Error)?.message ?? err}); retrying`);
				await this.pause(sub, outageDelay(attempt));
				if (sub.stopped) throw err;
			}
		}
	}

	private handlerOf(sub: Subscription): ChannelHandler {
		return async (rec: unknown, raw: RawMessage | undefined) => {
			let beat: NodeJS.Timeout | undefined;
			const working = raw?.working;
			if (this.kind === "nats" && typeof working === "function") {
				beat = setInterval(
					() => {
						try {
							working.call(raw);
						} catch {
							clearInterval(beat);
						}
					},
					Math.max(200, Math.floor(this.opts.ackWaitMs / 3)),
				);
			}
			sub.inFlight++;
			try {
				await sub.progress.step(`handling ${seqOf(rec) ?? "a message"}`, () => this.handleHeld(sub, rec));
				sub.progress.moved();
				const seq = seqOf(rec);
				if (seq !== undefined && seq > sub.position) sub.position = seq;
			} catch (err) {
				sub.progress.failed(err);
				this.logger?.warn(`event stream: group ${sub.group} failed on ${seqOf(rec) ?? sub.channel}: ${(err as Error)?.message ?? err}`);
				// NATS redelivers a NAK at once: hold the event (still in progress) for a backoff first.
				if (this.kind === "nats" && !sub.stopped) await this.pause(sub, retryDelay(Number(raw?.info?.deliveryCount ?? 1)));
				throw err;
			} finally {
				sub.inFlight--;
				if (beat) clearInterval(beat);
			}
		};
	}

	/** A sleep that the consumer's stop cuts short. */
	private pause(sub: Subscription, ms: number): Promise<void> {
		return new Promise((resolve) => {
			const done = () => {
				clearTimeout(t);
				sub.wakers.delete(done);
				resolve();
			};
			const t = setTimeout(done, ms);
			sub.wakers.add(done);
		});
	}

	private async stopSubscription(sub: Subscription): Promise<void> {
		if (sub.stopped) return;
		sub.stopped = true;
		for (const w of [...sub.wakers]) w();
		this.subs.delete(sub);
		sub.progress.close();
		await sub.running;
		// Waits for the handlers in progress (at most STOP_WAIT_MS: one may hang on a silent dependency); events
		// delivered but not acknowledged go to the group's other instances.
		if (sub.chan && this.adapter?.connected) {
			const unsubscribed = this.unsubscribe(sub.chan).then(
				() => true,
				(err) => {
					this.logger?.warn(`event stream: unsubscribing group ${sub.group} failed (${(err as Error).message})`);
					return false;
				},
			);
			if ((await withTimeout(unsubscribed, STOP_WAIT_MS)) === undefined)
				this.logger?.warn(`event stream: group ${sub.group} still busy after ${STOP_WAIT_MS} ms; stopping without it`);
		}
	}

	private async unsubscribe(chan: AdapterChannel): Promise<void> {
		if (chan.unsubscribing) return;
		chan.unsubscribing = true;
		if (this.kind === "nats") await unsubscribeNats(this.nats, chan);
		else await unsubscribeRedis(this.redis, chan);
	}

	/**
	 * Publishes one outbox record (the relay). JetStream de-duplicates a record published twice within its
	 * duplicate window (2 min) by its message id; past that, and on Redis, a republished record is delivered twice.
	 */
	publish(rec: OutboxRecord): Promise<void> {
		return this.publishTo(this.opts.channel, rec, `${rec.seq}-${rec.event?.id ?? ""}`);
	}

	/** Publishes one message to a channel of the stream; `msgID` is JetStream's de-duplication key. */
	async publishTo(channel: string, payload: unknown, msgID: string): Promise<void> {
		const a = this.adapter!;
		if (!this.isConnected()) throw new Error("event stream not connected");
		const opts = this.kind === "nats" ? { msgID } : { xaddMaxLen: `~${this.opts.maxMessages}` };
		await a.publish(this.subjectOf(channel), payload, opts);
		// The adapter returns without publishing once it is stopping: that must not count as published.
		if (a.stopping) throw new Error("event stream stopping: not published");
	}

	async ping(): Promise<boolean> {
		if (!this.isConnected()) return false;
		try {
			if (this.kind === "nats") {
				const nc = this.nats.connection;
				if (!nc || nc.isClosed()) return false;
				await Promise.race([nc.flush(), new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), 2000).unref())]);
				return true;
			}
			return (await this.redis.clients.get(this.redis.pubName)!.ping()) === "PONG";
		} catch {
			return false;
		}
	}

	/** Stops every consumer still running (the broker's services normally stopped theirs already). */
	async close(): Promise<void> {
		clearInterval(this.monitor);
		this.monitor = undefined;
		await Promise.all([...this.subs].map((s) => this.stopSubscription(s)));
	}
}

const byConfig = new WeakMap<object, ChannelsStream>();

/**
 * The production stream of a node, keyed by its configuration object (the one `brokerOptions(cfg)` and
 * `bindConfig` share), so that several platforms in one process (tests) each keep their own broker's adapter.
 */
export function channelsStreamFor(cfg: PlatformConfig): ChannelsStream {
	let s = byConfig.get(cfg);
	if (!s) byConfig.set(cfg, (s = new ChannelsStream(channelsStreamOptions(cfg), cfg)));
	return s;
}

/** The broker middleware of the production stream (moleculer.config.ts, when EVENT_STREAM is nats or redis). */
export function channelsMiddleware(cfg: PlatformConfig): Middleware {
	return channelsStreamFor(cfg).middleware();
}
