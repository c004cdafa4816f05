/**
 * The change stream the workers consume: every change event of the outbox, once per consumer group, at least once.
 * Embedded default (EVENT_STREAM=outbox): read straight from the persisted outbox, each group's position stored
 * durably, so a worker that crashes or a platform that restarts resumes where it stopped. Production
 * (EVENT_STREAM=nats|redis): @moleculer/channels fed by the relay, see events/channels.stream.ts and events/relay.ts.
 *
 * The contract, whichever implementation: at least once per group. A handler that throws gets the event again
 * (nothing after it is lost), and after a crash or restart events may come twice; handlers are idempotent or
 * de-duplicate on `seq` themselves: the stream does not.
 */
import type { PlatformConfig } from "../runtime/config";
import { DEFAULT_POSITION_TTL_MS, heartbeatEvery, OutboxPruner, passedByLive, positionDoc, sharedOutbox, type Outbox, type OutboxRecord } from "./outbox";
import { createStore, locationOf, type DocumentStore, type StoreConfig } from "../stores";
import { channelsStreamFor, STOP_WAIT_MS } from "./channels.stream";
import { trackProgress, withTimeout } from "../runtime/health";

export type ChangeHandler = (rec: OutboxRecord) => Promise<void>;
/**
 * Handles several records of one group at once, in stream order. Throwing hands the whole batch back (at least once:
 * every record of it comes again, the ones already handled too), so batch handlers are idempotent per record.
 */
export type BatchHandler = (recs: OutboxRecord[]) => Promise<void>;

export interface Consumer {
	stop(): Promise<void>;
	/** Position of the last record this group has handled. */
	position(): number;
}

export interface ConsumeOptions {
	/**
	 * Events of this group handled at once (production stream; NATS counts the whole group, Redis each instance).
	 * Default STREAM_MAX_IN_FLIGHT (1: in stream order); more only for handlers that tolerate reordering. The embedded
	 * stream always handles one at a time.
	 */
	maxInFlight?: number;
}

export interface BatchOptions extends ConsumeOptions {
	/**
	 * Most records one call of the batch handler takes (default 100). The embedded stream hands over what the outbox
	 * holds after the group's position, up to this many; the production stream groups the events in flight at once
	 * (at most `maxInFlight`: with the default of 1 its batches hold one event).
	 */
	maxBatch?: number;
}

export const DEFAULT_BATCH = 100;

export interface ChangeStream {
	readonly kind: string;
	consume(group: string, handler: ChangeHandler, opts?: ConsumeOptions): Promise<Consumer>;
	/** The group's records in batches: one handler call, and one stored position, per batch. */
	consumeBatches(group: string, handler: BatchHandler, opts?: BatchOptions): Promise<Consumer>;
	ping(): Promise<boolean>;
	close(): Promise<void>;
}

const POLL_MS = 500;
/**
 * A group's position is stored at most this often while it moves (and at once at a failure, at stop, and when a
 * batch's worth of positions has been handled since the last store): under a stream of small batches every group
 * would otherwise write its position once per batch, several statements per change. A crash replays what was handled
 * since the last store (at most this long of events, at most one batch's worth) and the batch in progress.
 */
export const POSITION_SAVE_MS = 250;
/** A group with nothing to read looks again after this even without a signal (the outbox's feed signals every record it reads). */
const IDLE_MS = 5000;
const BATCH = 100;
const RETRY_MS = [100, 500, 2000, 5000];

export class OutboxStream implements ChangeStream {
	readonly kind = "outbox";
	private offsets: DocumentStore;
	private outbox: Outbox;
	private ready?: Promise<void>;
	/** The running consumers, so that a stopping node ends them before the services their handlers call. */
	private consumers = new Set<Consumer>();
	/**
	 * Removes the outbox records every group has passed (the lowest stored group position), and those older than
	 * STREAM_RETENTION_HOURS: a pass shortly after a group moves, and every 10 minutes.
	 */
	readonly pruner: OutboxPruner;
	/** The node's configuration object, under which its groups' progress is reported (runtime/health.ts, /status). */
	private readonly owner: object;
	/** Stored with each group's position, which another namespace's pruner ignores once it is not renewed (STREAM_POSITION_TTL_MS). */
	private readonly ns?: string;
	private readonly positionTtlMs: number;

	constructor(cfg: StoreConfig & Partial<Pick<PlatformConfig, "streamRetentionHours" | "outboxGraceMs" | "streamPositionTtlMs" | "namespace">>) {
		this.ns = cfg.namespace;
		this.positionTtlMs = cfg.streamPositionTtlMs ?? DEFAULT_POSITION_TTL_MS;
		this.outbox = sharedOutbox(cfg);
		this.offsets = createStore(cfg, "_stream_offsets");
		this.owner = cfg;
		this.pruner = new OutboxPruner(this.outbox, () => this.passedAll(), cfg.streamRetentionHours, cfg.outboxGraceMs);
	}

	private init(): Promise<void> {
		this.ready ??= (async () => {
			await this.outbox.connect();
			await this.offsets.connect();
			this.pruner.start();
		})();
		return this.ready;
	}

	/**
	 * The position every known group has passed; 0 (nothing) before any group exists. Groups of another namespace count
	 * only while they renew their position (passedByLive).
	 */
	private passedAll(): Promise<number> {
		return passedByLive(this.offsets, this.ns, this.positionTtlMs);
	}

	/** Whether every group has passed every event appended so far (tests and operators: "the workers caught up"). */
	async drained(): Promise<boolean> {
		return (await this.outbox.readFrom(await this.passedAll(), 1)).length === 0;
	}

	/**
	 * One handler at a time per record, in order: a record that fails is retried (with a backoff) before anything
	 * after it; the position moves per record, so a failure never replays the records before it.
	 */
	consume(group: string, handler: ChangeHandler): Promise<Consumer> {
		return this.run(group, BATCH, async (batch, handled) => {
			for (const rec of batch) {
				await handler(rec);
				// Stopping: the records after this one wait for the next run.
				if (!handled(rec.seq)) break;
			}
		});
	}

	consumeBatches(group: string, handler: BatchHandler, opts: BatchOptions = {}): Promise<Consumer> {
		return this.run(group, Math.max(1, Math.round(opts.maxBatch ?? DEFAULT_BATCH)), async (batch, handled) => {
			await handler(batch);
			handled(batch[batch.length - 1].seq);
		});
	}

	/**
	 * The group's loop: reads up to `max` records after its position and gives them to `step`, which reports what it
	 * handled. The position is stored at most every POSITION_SAVE_MS while it moves (and at once at a failure, at stop,
	 * and once `max` positions are handled and not stored), not once per record or batch: a crash replays at most one
	 * batch's worth of handled records and the batch in progress (at least once). A step that throws gets the records
	 * from the first unhandled one again after a backoff.
	 */
	private async run(group: string, max: number, step: (batch: OutboxRecord[], handled: (seq: number) => boolean) => Promise<void>): Promise<Consumer> {
		await this.init();
		const saved = await this.offsets.findOne({ id: group });
		// A new group starts at the beginning of the outbox: nothing written before it existed is missed.
		let position = Number(saved?.seq ?? 0);
		// Known (and alive) from now on, so the pruner keeps what this group has not read yet.
		if (!saved) await this.offsets.insert({ id: group, ...positionDoc(position, this.ns) }).catch(() => undefined);
		else await this.offsets.setOne(group, positionDoc(position, this.ns)).catch(() => undefined);
		let stored = position;
		let stopped = false;
		let wake: (() => void) | undefined;
		// Set by the outbox's `readable` (new records, once per burst); a sleep that finds it set returns at once.
		let signalled = false;
		const onReadable = () => {
			signalled = true;
			wake?.();
		};
		this.outbox.on("readable", onReadable);
		/** Waits `ms`, or less: until stopped, or (`untilReadable`) until new records are signalled. */
		const sleep = (ms: number, untilReadable: boolean) =>
			new Promise<void>((resolve) => {
				if (stopped || (untilReadable && signalled)) return resolve();
				const t = setTimeout(done, ms);
				function done() {
					clearTimeout(t);
					wake = undefined;
					resolve();
				}
				wake = () => {
					if (stopped || (untilReadable && signalled)) done();
				};
			});
		// A failed save must not end the loop: the position in memory is right and the next save stores it (a restart
		// before then replays from the stored one: at least once). Each save renews the heartbeat; `beat` saves an
		// unmoved position too (the heartbeat timer, while the group waits or retries).
		// Saves run one after another (a later one never lands before an earlier one); `saveSoon` stores the position at
		// most every POSITION_SAVE_MS, the others at once.
		let saving: Promise<void> = Promise.resolve();
		let savedAt = 0;
		let saveTimer: NodeJS.Timeout | undefined;
		const store = async (beat: boolean) => {
			if (position === stored && !beat) return;
			const at = position;
			savedAt = Date.now();
			try {
				const doc = positionDoc(at, this.ns);
				if (!(await this.offsets.setOne(group, doc))) await this.offsets.insert({ id: group, ...doc });
				// The pruner reads stored positions: a pass once this one moved.
				if (at !== stored) this.pruner.schedule();
				stored = at;
			} catch {
				/* the next save stores it */
			}
		};
		const save = (beat = false): Promise<void> => {
			if (saveTimer) clearTimeout(saveTimer);
			saveTimer = undefined;
			return (saving = saving.then(() => store(beat)));
		};
		const saveSoon = () => {
			if (position === stored) return;
			const wait = savedAt + POSITION_SAVE_MS - Date.now();
			// Never more than a batch's worth of positions handled and not stored: a crash replays at most that plus the
			// batch in progress (the observer's de-duplication remembers two batches: workers/observer.worker.ts).
			if (wait <= 0 || position - stored >= max) return void save();
			if (saveTimer) return;
			saveTimer = setTimeout(() => {
				saveTimer = undefined;
				void save();
			}, wait);
			saveTimer.unref();
		};
		const heartbeat = setInterval(() => void save(true), heartbeatEvery(this.positionTtlMs));
		heartbeat.unref();
		// Moves with each handled batch and each read that finds nothing new; a read or a handler that hangs or fails does not.
		const progress = trackProgress(this.owner, `event group ${group}`);
		const loop = (async () => {
			let attempt = 0;
			while (!stopped) {
				let batch: OutboxRecord[] = [];
				// Records appended from here on signal again.
				signalled = false;
				try {
					batch = await progress.step("reading the outbox", () => this.outbox.readFed(position, max));
				} catch (err) {
					progress.failed(err);
					await sleep(POLL_MS, false);
					continue;
				}
				if (!batch.length) {
					progress.moved();
					await sleep(IDLE_MS, true);
					continue;
				}
				try {
					await progress.step(`handling ${batch[0].seq}`, () =>
						step(batch, (seq) => {
							if (!stopped) position = seq;
							return !stopped;
						}),
					);
					progress.moved();
					attempt = 0;
				} catch (err) {
					progress.failed(err);
					await save();
					if (!stopped) await sleep(RETRY_MS[Math.min(attempt++, RETRY_MS.length - 1)], false);
					continue;
				}
				saveSoon();
				// A short batch took everything there was: the next read waits for the records appended meanwhile to be
				// signalled (at once if they already were), so that they come as one batch.
				if (batch.length < max) await sleep(IDLE_MS, true);
			}
			await save();
		})();
		const consumer: Consumer = {
			position: () => position,
			stop: async () => {
				stopped = true;
				clearInterval(heartbeat);
				progress.close();
				wake?.();
				this.outbox.off("readable", onReadable);
				this.consumers.delete(consumer);
				// A handler waiting on a dependency that hangs ends by that dependency's timeouts; a stop goes on without it.
				await withTimeout(loop, STOP_WAIT_MS);
			},
		};
		this.consumers.add(consumer);
		return consumer;
	}

	/** Stops every consumer of this stream, each after the batch it is handling. */
	async stopConsumers(): Promise<void> {
		await Promise.all([...this.consumers].map((c) => c.stop()));
	}

	ping(): Promise<boolean> {
		return this.outbox.ping();
	}

	async close(): Promise<void> {
		await this.stopConsumers();
		if (!this.ready) return;
		await this.ready;
		await this.pruner.stop();
		await this.offsets.disconnect();
		await this.outbox.disconnect();
		this.ready = undefined;
	}
}

const shared = new Map<string, OutboxStream>();

/** The embedded stream (the persisted outbox read by consumer groups): one per process and data location. */
export function embeddedStream(cfg: StoreConfig & Partial<PlatformConfig>): OutboxStream {
	const key = locationOf(cfg);
	let s = shared.get(key);
	if (!s) shared.set(key, (s = new OutboxStream(cfg)));
	return s;
}

/**
 * The node's change stream, as EVENT_STREAM says. Embedded: one per process and data location. Production: the
 * one the broker's channels middleware drives (moleculer.config.ts), found by the node's configuration object.
 */
export function sharedStream(cfg: StoreConfig & Partial<PlatformConfig>): ChangeStream {
	if (cfg.eventStream && cfg.eventStream !== "outbox") return channelsStreamFor(cfg as PlatformConfig);
	return embeddedStream(cfg);
}

/**
 * Stops the node's consumer groups, each once the events it is handling are done (production: the subscriptions of
 * every channel; the connection stays, the relay still publishes). A node stops them before its services: otherwise
 * the services stop in parallel with the workers, and a handler in progress calls a service, or a store, that is
 * already gone (`group observer failed … reading 'indexes'`). The workers' own stop then finds them stopped.
 */
export async function stopConsumers(cfg: StoreConfig & Partial<PlatformConfig>): Promise<void> {
	if (cfg.eventStream && cfg.eventStream !== "outbox") return channelsStreamFor(cfg as PlatformConfig).close();
	await shared.get(locationOf(cfg))?.stopConsumers();
}

/**
 * Closes the embedded streams of this data location (all without `cfg`): another platform of the same process
 * (tests) keeps its own. Production streams close with their broker (the channels middleware).
 */
export async function closeSharedStreams(cfg?: StoreConfig): Promise<void> {
	for (const [key, s] of [...shared]) {
		if (cfg && key !== locationOf(cfg)) continue;
		shared.delete(key);
		await s.close();
	}
}
