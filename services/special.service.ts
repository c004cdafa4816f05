/**
 * special: the standard collection pattern on every collection of the domain (catalog/domains/special.ts), file
 * content (services/special/files.ts: upload, share, download, orphans), and the observer's internal write path
 * into special/stats (`stats.increment`).
 */
import type { ServiceSchema } from "moleculer";
import { special } from "../catalog/domains/special";
import { collectionMixin, platformDoc } from "../mixins/collection.mixin";
import { configOf } from "../lib/config";
import { badRequest } from "../lib/errors";
import { sharedKeyValue } from "../lib/kv";
import { withLease } from "../lib/lock";
import { isDuplicateKeyError, type DocumentStore } from "../mixins/stores";
import { bucketOf, COUNTERS, PERIODS, SEQ_WINDOW, statId, type Counter } from "../lib/stat-buckets";
import { collect } from "./special/collect";
import { filesHooks, filesMixin } from "./special/files";

export interface StatsIncrement {
	/** Stream position of the change event: the redelivery guard. */
	seq: number;
	service: string;
	collection: string;
	counter: Counter;
	/** Time of the change (ms): chooses the buckets. */
	ts_ms: number;
	/** The changed document's `clients`: each tenant gets its own buckets. Empty: one platform-wide set. */
	clients: string[];
}

/**
 * Stats documents belong to the tenant whose documents they count: `owner` and `clients` are that client id, so a
 * client token sees them in its own zone and a user of the client with `zone=client`. Counts of documents with no
 * client (none in practice) go to owner `platform` with empty `clients`, visible through no zone.
 */
const PLATFORM_OWNER = "platform";
const LEASE_TTL_MS = 10_000;
const LEASE_WAIT_MS = 15_000;

async function bump(store: DocumentStore, client: string, p: StatsIncrement): Promise<{ applied: number; skipped: number }> {
	let applied = 0;
	let skipped = 0;
	const owner = client || PLATFORM_OWNER;
	for (const period of PERIODS) {
		const bucket = bucketOf(period, p.ts_ms);
		const id = statId(client, p.service, p.collection, period, bucket);
		for (let attempt = 0; ; attempt++) {
			const doc = await store.findOne({ id });
			if (doc) {
				const seqs = Array.isArray(doc.seqs) ? (doc.seqs as number[]) : [];
				if (seqs.includes(p.seq)) {
					skipped++;
					break;
				}
				await store.setOne(id, {
					[p.counter]: (Number(doc[p.counter]) || 0) + 1,
					seqs: [...seqs, p.seq].slice(-SEQ_WINDOW),
					updated_at: new Date().toISOString(),
					updated_by: owner,
					updated_in: owner,
					timestamp: String(Date.now()),
				});
				applied++;
				break;
			}
			const counts = Object.fromEntries(COUNTERS.map((c) => [c, c === p.counter ? 1 : 0]));
			const fresh = platformDoc({ service: p.service, collection: p.collection, period, bucket, ...counts, seqs: [p.seq] }, { owner, cid: owner });
			fresh._id = id;
			if (!client) fresh.clients = [];
			try {
				await store.insert(fresh);
				applied++;
				break;
			} catch (err) {
				// Another node created the bucket first: count on top of its document.
				if (!isDuplicateKeyError(err) || attempt > 0) throw err;
			}
		}
	}
	return { applied, skipped };
}

const SpecialService: ServiceSchema = {
	name: "special",
	mixins: [collectionMixin(special, { stats: { specials: { collect } }, files: filesHooks }), filesMixin as unknown as Partial<ServiceSchema>],
	actions: {
		/**
		 * The observer's write into special/stats (internal, never routed): +1 on `counter` in the daily, monthly and
		 * yearly buckets of each tenant. Idempotent: a bucket remembers the latest positions it counted, so a
		 * redelivered event is skipped. Read-modify-write runs under a lease per tenant and collection, so observer
		 * instances on several nodes do not lose updates. These writes append no change events: stats are derived
		 * data, and events about them would feed the observer and triple every tenant's webhook traffic.
		 */
		"stats.increment": {
			visibility: "public",
			async handler(this: any, ctx: any): Promise<{ applied: number; skipped: number }> {
				const p = ctx.params as StatsIncrement;
				if (!Number.isFinite(p.seq) || typeof p.service !== "string" || typeof p.collection !== "string" || !COUNTERS.includes(p.counter) || !Number.isFinite(p.ts_ms))
					throw badRequest("seq, service, collection, counter and ts_ms are required");
				const cfg = configOf(this.broker);
				const kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
				const store: DocumentStore = this.collectionStore("stats");
				const clients = Array.isArray(p.clients) && p.clients.length ? [...new Set(p.clients.filter((c) => typeof c === "string" && c))] : [""];
				let applied = 0;
				let skipped = 0;
				for (const client of clients.length ? clients : [""]) {
					const r = await withLease(kv, `special:stats:${client}:${p.service}.${p.collection}`, LEASE_TTL_MS, LEASE_WAIT_MS, () => bump(store, client, p));
					applied += r.applied;
					skipped += r.skipped;
				}
				return { applied, skipped };
			},
		},
	},
};

export default SpecialService;
