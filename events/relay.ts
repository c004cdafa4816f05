/**
 * The relay (EVENT_STREAM=nats|redis): moves the records of the durable outbox to the production stream's channel
 * (events/channels.stream.ts), in seq order, at least once. It runs on every node that hosts domain services
 * (platform.ts adds it), because those are the nodes that append to the outbox.
 *
 * - Position: like the embedded stream's groups, the relay keeps the seq of the last record it published in the
 *   same store family as the outbox (`_relay_offsets`, keyed by channel), saved after each batch; after a restart or
 *   a take-over it continues from there. A crash between a publish and the save republishes that batch: JetStream
 *   drops such repeats within its duplicate window (message id = seq and document id), Redis does not.
 * - One publisher per outbox: nodes that share one production store (MONGO_URI) share one outbox, so the relays
 *   take a lock in the platform cache (lib/kv setIfAbsent, TTL 15 s, renewed every 5 s; REDIS_URL for nodes in
 *   several processes) and only its holder publishes. A holder that dies is replaced when the lock expires; the
 *   renewal is a read-then-write (the cache has no compare-and-set), so for a moment two relays may both publish:
 *   repeats, never gaps. Nodes with their own embedded outbox (DATA_DIR) lock their own location.
 * - Late records: seq values are timestamps taken before the insert, so with several writers on one store a record
 *   can become visible after a later one was already published. The relay publishes a record only once it is
 *   RELAY_SETTLE_MS old (default 1 s with MongoDB; 0 with NeDB, whose single process inserts in seq order).
 * - At least once is the whole contract: the published message is the OutboxRecord itself, and consumers
 *   de-duplicate nothing; handlers are idempotent (or key on `seq`).
 */
import { createHash, randomBytes } from "crypto";
import os from "os";
import type { ServiceSchema } from "moleculer";
import { configOf, type PlatformConfig } from "../lib/config";
import { sharedKeyValue, type KeyValue } from "../lib/kv";
import { OutboxPruner, sharedOutbox, type Outbox, type OutboxRecord } from "./outbox";
import { createStore, locationOf, onPostgres, type DocumentStore } from "../mixins/stores";
import { channelsStreamFor, type ChannelsStream } from "./channels.stream";

const LOCK_TTL_MS = 15_000;
const RENEW_MS = 5_000;
const POLL_MS = 500;
const BATCH = 100;

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
	private onAppend = () => this.wake?.();
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
		// Nodes sharing one store (MongoDB, PostgreSQL) share one outbox, so one lock.
		const location = cfg.mongoUri || onPostgres(cfg) ? locationOf(cfg) : `${os.hostname()}:${cfg.dataDir}`;
		const where = createHash("sha256").update(location).digest("hex").slice(0, 16);
		this.lockKey = `relay:${cfg.namespace}:${stream.opts.channel}:${where}`;
		this.positionId = `relay:${cfg.namespace}.${stream.opts.channel}`;
		this.token = `${nodeID}:${randomBytes(6).toString("hex")}`;
		this.settleMs = cfg.relaySettleMs ?? (cfg.mongoUri ? 1000 : 0);
		this.pruner = new OutboxPruner(
			this.outbox,
			async () => {
				const all = await this.offsets.store.find({ query: {} });
				return all.length ? Math.min(...all.map((d) => Number(d.seq ?? 0))) : 0;
			},
			cfg.streamRetentionHours,
			cfg.outboxGraceMs,
		);
	}

	start(): void {
		this.outbox.on("appended", this.onAppend);
		this.renewer = setInterval(() => void this.renew(), RENEW_MS);
		this.renewer.unref();
		this.loop = this.run();
	}

	async stop(): Promise<void> {
		this.stopped = true;
		if (this.renewer) clearInterval(this.renewer);
		this.outbox.off("appended", this.onAppend);
		this.wake?.();
		await this.loop;
		await this.pruner.stop();
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
		this.leader = true;
		this.pruner.start();
		this.logger.info(`relay: publishing the outbox to ${this.stream.subject} from ${this.position}`);
		return true;
	}

	private async renew(): Promise<void> {
		if (!this.leader || this.stopped) return;
		try {
			if ((await this.kv.get(this.lockKey)) === this.token) await this.kv.set(this.lockKey, this.token, LOCK_TTL_MS);
			else {
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
		if (await s.findOne({ id: this.positionId })) await s.setOne(this.positionId, { seq: this.position });
		else await s.insert({ _id: this.positionId, seq: this.position });
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
					await this.sleep(POLL_MS);
					continue;
				}
				if (!this.leader && !(await this.acquire())) {
					await this.sleep(RENEW_MS);
					continue;
				}
				const all = await this.outbox.readFrom(this.position, BATCH);
				const horizon = this.settleMs ? Date.now() * 1000 - this.settleMs * 1000 : Infinity;
				const batch = all.filter((r) => r.seq <= horizon);
				if (!batch.length) {
					// Not yet settled: look again when the first one is; else wait for an append or the next poll.
					const wait = all.length ? Math.min(POLL_MS, Math.ceil((all[0].seq - horizon) / 1000) + 1) : POLL_MS;
					await this.sleep(wait);
					continue;
				}
				let moved = false;
				try {
					for (const rec of batch) {
						if (this.stopped || !this.leader) break;
						await this.stream.publish(rec as OutboxRecord);
						this.position = rec.seq;
						this.published++;
						moved = true;
					}
				} finally {
					if (moved) {
						await this.save().catch((err) => this.logger.warn(`relay: saving the position failed (${(err as Error).message})`));
						if (this.leader) this.pruner.schedule();
					}
				}
				failures = 0;
			} catch (err) {
				failures++;
				if (failures === 1 || failures % 20 === 0) this.logger.warn(`relay: ${(err as Error).message}; retrying`);
				await this.sleep(Math.min(5000, 100 * 2 ** Math.min(failures, 6)));
			}
		}
	}
}

/** The relay as a service: one per node that hosts domain services when EVENT_STREAM is nats or redis. */
export function relayService(): ServiceSchema {
	return {
		name: "relay",
		started(this: any) {
			const cfg = configOf(this.broker);
			this.relay = new Relay(cfg, channelsStreamFor(cfg), this.logger, this.broker.nodeID);
			// Not awaited: the stream connects after every service has started (the channels middleware's hook).
			this.relay.start();
		},
		async stopped(this: any) {
			await (this.relay as Relay | undefined)?.stop();
		},
	} as ServiceSchema;
}
