/**
 * The relay (EVENT_STREAM=nats|redis): moves the records of the durable outbox to the production stream's channel
 * (events/channels.stream.ts), in seq order, at least once. It runs on every node that hosts domain services
 * (platform.ts adds it), because those are the nodes that append to the outbox.
 *
 * - Position: like the embedded stream's groups, the relay keeps the seq of the last record it published in the
 *   same store family as the outbox (`_relay_offsets`, keyed by channel), saved after each batch; after a restart or
 *   a take-over it continues from there. A crash between a publish and the save republishes that batch: JetStream
 *   drops such repeats within its duplicate window (message id = seq and document id), Redis does not.
 * - One publisher per outbox: nodes that share one database (DATABASE_URL) share one outbox, so the relays
 *   take a lock in the platform cache (runtime/kv setIfAbsent, TTL 15 s, renewed every 5 s; REDIS_URL for nodes in
 *   several processes) and only its holder publishes. A holder that dies is replaced when the lock expires; the
 *   renewal is a read-then-write (the cache has no compare-and-set), so for a moment two relays may both publish:
 *   repeats, never gaps. Nodes with their own embedded outbox (DATA_DIR) lock their own location.
 * - Order: positions follow commit order (stores/pg.outbox.ts), so a record never becomes visible after a later
 *   one was published; RELAY_SETTLE_MS (default 0) still holds a record back until it is that old.
 * - Namespaces: the relay publishes only the records its own NAMESPACE wrote (`ns`), so a node started with another
 *   NAMESPACE on the same database republishes nothing of this deployment's into its own stream. Its position carries
 *   a heartbeat (`at`, renewed with the lock); the pruner ignores another namespace's position not renewed within
 *   STREAM_POSITION_TTL_MS (1 h), so such a node, once gone, holds no record back (docs/production.md).
 * - At least once is the whole contract: the published message is the OutboxRecord itself, and consumers
 *   de-duplicate nothing; handlers are idempotent (or key on `seq`).
 */
import { createHash, randomBytes } from "crypto";
import type { Service, ServiceSchema } from "moleculer";
import { asSchema } from "../lib/service";
import { configOf, type PlatformConfig } from "../runtime/config";
import { sharedKeyValue, type KeyValue } from "../runtime/kv";
import { DEFAULT_POSITION_TTL_MS, heartbeatEvery, OutboxPruner, passedByLive, positionDoc, sharedOutbox, type Outbox, type OutboxRecord, type StoredPosition } from "./outbox";
import { createStore, locationOf, type DocumentStore } from "../stores";
import { channelsStreamFor, STOP_WAIT_MS, type ChannelsStream } from "./channels.stream";
import { Progress, trackProgress, withTimeout } from "../runtime/health";

const LOCK_TTL_MS = 15_000;
const RENEW_MS = 5_000;
const POLL_MS = 500;
/** An idle relay looks again after this even without a signal (the outbox's feed signals every record it reads). */
const IDLE_MS = 5000;
const BATCH = 100;
/** The relay's entry in /status while it is stalled. */
export const RELAY_STAGE = "event relay";

interface Logger {
	warn(...args: unknown[]): void;
	info(...args: unknown[]): void;
}

/** Relay positions, one store per data location and process, shared by the relays of that location. */
const offsetStores = new Map<string, { store: DocumentStore; users: number; ready: Promise<void> }>();

function acquireOffsets(cfg: PlatformConfig): { store: DocumentStore; ready: Promise<void>; release(): Promise<void> } {
	const key = locationOf(cfg);
	let e = offsetStores.get(key);
	if (!e) {
		const store = createStore(cfg, "_relay_offsets");
		offsetStores.set(key, (e = { store, users: 0, ready: store.connect() }));
	}
	e.users++;
	const entry = e;
	return {
		store: entry.store,
		ready: entry.ready,
		async release() {
			if (--entry.users > 0) return;
			offsetStores.delete(key);
			await entry.ready.catch(() => undefined);
			await entry.store.disconnect();
		},
	};
}

export class Relay {
	/** Records this relay published (repeats included). */
	published = 0;
	leader = false;
	position = 0;
	readonly lockKey: string;
	private readonly positionId: string;
	private readonly token: string;
	private readonly settleMs: number;
	private outbox: Outbox;
	private offsets: ReturnType<typeof acquireOffsets>;
	private kv: KeyValue;
	private stopped = false;
	private loop?: Promise<void>;
	private renewer?: NodeJS.Timeout;
	private wake?: () => void;
	/** Set by the outbox's `readable` (its feed read new records); a sleep that finds it set returns at once. */
	private signalled = false;
	private onReadable = () => {
		this.signalled = true;
		// Another relay publishes: this one looks again at its lock's renewal, not at every record.
		if (this.leader) this.wake?.();
	};
	/**
	 * Whether it moves (/status `event relay`, `platform_pipeline_stalled`): each published record or a read that found nothing
	 * due moves it, as does another relay holding the lock; a step hung on a dependency, or failures, do not.
	 */
	private progress = new Progress(RELAY_STAGE);
	/** When the position was last stored (its heartbeat), and the other namespaces met in the outbox (logged once). */
	private savedAt = 0;
	private readonly heartbeatMs: number;
	private readonly foreign = new Set<string>();
	/**
	 * The outbox's consumers here are the relays (one position per channel): the leader removes what every relay
	 * position has passed, and what is older than STREAM_RETENTION_HOURS.
	 */
	readonly pruner: OutboxPruner;

	constructor(
		private cfg: PlatformConfig,
		private stream: ChannelsStream,
		private logger: Logger,
		nodeID: string,
	) {
		this.outbox = sharedOutbox(cfg);
		this.offsets = acquireOffsets(cfg);
		this.kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
		// Nodes sharing one database share one outbox, so one lock.
		const location = locationOf(cfg);
		const where = createHash("sha256").update(location).digest("hex").slice(0, 16);
		this.lockKey = `relay:${cfg.namespace}:${stream.opts.channel}:${where}`;
		this.positionId = `relay:${cfg.namespace}.${stream.opts.channel}`;
		this.token = `${nodeID}:${randomBytes(6).toString("hex")}`;
		this.settleMs = cfg.relaySettleMs ?? 0;
		const ttlMs = cfg.streamPositionTtlMs ?? DEFAULT_POSITION_TTL_MS;
		this.heartbeatMs = heartbeatEvery(ttlMs);
		// Positions saved before they named their namespace: it is in their id, `relay:<namespace>.<channel>`.
		const suffix = `.${stream.opts.channel}`;
		const nsOf = (p: StoredPosition) => (typeof p.ns === "string" ? p.ns : p.id.startsWith("relay:") && p.id.endsWith(suffix) ? p.id.slice(6, -suffix.length) : undefined);
		this.pruner = new OutboxPruner(this.outbox, () => passedByLive(this.offsets.store, cfg.namespace, ttlMs, nsOf), cfg.streamRetentionHours, cfg.outboxGraceMs);
	}

	start(): void {
		this.progress = trackProgress(this.cfg, RELAY_STAGE);
		this.outbox.on("readable", this.onReadable);
		this.renewer = setInterval(() => void this.renew(), Math.min(RENEW_MS, this.heartbeatMs));
		this.renewer.unref();
		this.loop = this.run();
	}

	async stop(): Promise<void> {
		this.stopped = true;
		if (this.renewer) clearInterval(this.renewer);
		this.outbox.off("readable", this.onReadable);
		this.wake?.();
		this.progress.close();
		// A loop (or a prune) waiting on a dependency that hangs ends by the dependency's own timeouts; the stop does not
		// wait for them past STOP_WAIT_MS (whatever it had published is published; its position is saved at the next run).
		if (
			(await withTimeout(
				Promise.resolve(this.loop).then(() => true),
				STOP_WAIT_MS,
			)) === undefined
		)
			this.logger.warn(`relay: still waiting on a dependency after ${STOP_WAIT_MS} ms; stopping without it`);
		await withTimeout(this.pruner.stop(), STOP_WAIT_MS);
		if (this.leader) {
			this.leader = false;
			try {
				if ((await this.kv.get(this.lockKey)) === this.token) await this.kv.del(this.lockKey);
			} catch {
				/* the lock expires by itself */
			}
		}
		await this.outbox.disconnect().catch(() => undefined);
		await this.offsets.release().catch(() => undefined);
	}

	private sleep(ms: number): Promise<void> {
		return new Promise((resolve) => {
			const done = () => {
				clearTimeout(t);
				this.wake = undefined;
				resolve();
			};
			const t = setTimeout(done, ms);
			this.wake = done;
		});
	}

	private async acquire(): Promise<boolean> {
		const mine = (await this.kv.setIfAbsent(this.lockKey, this.token, LOCK_TTL_MS)) || (await this.kv.get(this.lockKey)) === this.token;
		if (!mine) return false;
		// Another relay may have moved the position while this one waited.
		const saved = await this.offsets.store.findOne({ id: this.positionId });
		this.position = Math.max(this.position, Number(saved?.seq ?? 0));
		// Its heartbeat from now on: the position of a namespace whose relays all went away stops counting (passedByLive).
		await this.save().catch(() => undefined);
		this.leader = true;
		this.pruner.start();
		this.logger.info(`relay: publishing the outbox to ${this.stream.subject} from ${this.position}`);
		return true;
	}

	private async renew(): Promise<void> {
		if (!this.leader || this.stopped) return;
		try {
			if ((await this.kv.get(this.lockKey)) === this.token) {
				await this.kv.set(this.lockKey, this.token, LOCK_TTL_MS);
				// The position's heartbeat, also while nothing is published.
				if (Date.now() - this.savedAt >= this.heartbeatMs) await this.save().catch(() => undefined);
			} else {
				this.leader = false;
				this.logger.warn("relay: lost the lock; another relay publishes");
			}
		} catch {
			// Without the cache the lock cannot be proven: stop publishing until it can be taken again.
			this.leader = false;
		}
	}

	private async save(): Promise<void> {
		const s = this.offsets.store;
		const doc = positionDoc(this.position, this.cfg.namespace);
		if (await s.findOne({ id: this.positionId })) await s.setOne(this.positionId, doc);
		else await s.insert({ id: this.positionId, ...doc });
		this.savedAt = doc.at;
	}

	/** Whether a record is this namespace's to publish (records of earlier versions name none: published as before). */
	private ours(rec: OutboxRecord): boolean {
		if (rec.ns === undefined || rec.ns === this.cfg.namespace) return true;
		if (!this.foreign.has(rec.ns)) {
			this.foreign.add(rec.ns);
			this.logger.warn(
				`relay: the outbox holds events of namespace ${rec.ns} (nodes of another deployment write to this database); only namespace ${this.cfg.namespace}'s are published to ${this.stream.subject}`,
			);
		}
		return false;
	}

	private async run(): Promise<void> {
		let failures = 0;
		try {
			await this.outbox.connect();
			await this.offsets.ready;
		} catch (err) {
			this.logger.warn(`relay: cannot open the outbox (${(err as Error).message})`);
		}
		while (!this.stopped) {
			try {
				if (!this.stream.isConnected()) {
					this.progress.failed("event stream not connected");
					await this.sleep(POLL_MS);
					continue;
				}
				if (!this.leader && !(await this.progress.step("taking the lock", () => this.acquire()))) {
					// Another relay publishes: nothing of this one's to do.
					this.progress.moved();
					await this.sleep(RENEW_MS);
					continue;
				}
				this.signalled = false;
				const all = await this.progress.step("reading the outbox", () => this.outbox.readFed(this.position, BATCH));
				const horizon = this.settleMs ? Date.now() * 1000 - this.settleMs * 1000 : Infinity;
				const batch = all.filter((r) => r.seq <= horizon);
				if (!batch.length) {
					this.progress.moved();
					// Not yet settled: look again when the first one is; else wait for an append or the next poll.
					if (all.length) await this.sleep(Math.min(POLL_MS, Math.ceil((all[0].seq - horizon) / 1000) + 1));
					else if (!this.signalled) await this.sleep(IDLE_MS);
					continue;
				}
				let moved = false;
				try {
					for (const rec of batch) {
						if (this.stopped || !this.leader) break;
						if (this.ours(rec)) {
							await this.progress.step("publishing to the event stream", () => this.stream.publish(rec as OutboxRecord));
							this.published++;
						}
						this.position = rec.seq;
						this.progress.moved();
						moved = true;
					}
				} finally {
					if (moved) {
						await this.progress.step("saving the position", () => this.save()).catch((err) => this.logger.warn(`relay: saving the position failed (${(err as Error).message})`));
						if (this.leader) this.pruner.schedule();
					}
				}
				failures = 0;
			} catch (err) {
				failures++;
				this.progress.failed(err);
				if (failures === 1 || failures % 20 === 0) this.logger.warn(`relay: ${(err as Error).message}; retrying`);
				await this.sleep(Math.min(5000, 100 * 2 ** Math.min(failures, 6)));
			}
		}
	}
}

/** The relay service's `this` (lib/service.ts). */
type RelayService = Service & { relay?: Relay };

/** The relay as a service: one per node that hosts domain services when EVENT_STREAM is nats or redis. */
export function relayService(): ServiceSchema {
	return asSchema<RelayService>({
		name: "relay",
		started(this: RelayService) {
			const cfg = configOf(this.broker);
			this.relay = new Relay(cfg, channelsStreamFor(cfg), this.logger, this.broker.nodeID);
			// Not awaited: the stream connects after every service has started (the channels middleware's hook).
			this.relay.start();
		},
		async stopped(this: RelayService) {
			await this.relay?.stop();
		},
	});
}
