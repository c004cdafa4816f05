/**
 * The observer's write into special/stats, for a batch of change events at once: the increments are summed per
 * bucket, so a batch costs one read and one write per bucket it touches (three for a batch of one tenant's creates
 * of one day) instead of three of each per event. Idempotent: a bucket remembers the latest positions it counted
 * (SEQ_WINDOW, at least twice the observer's batch, which is what a redelivery replays), and a redelivered event is
 * skipped. Each (tenant, service, collection) is written under a lease, so observers on several nodes do not lose
 * updates.
 */
import { platformDoc } from "../../engine/collection.mixin";
import { badRequest } from "../../lib/errors";
import type { KeyValue } from "../../runtime/kv";
import { withLease } from "../../runtime/lock";
import { isDuplicateKeyError, type DocumentStore } from "../../stores";
import { flushUnit } from "../../stores/unit";
import { bucketOf, COUNTERS, PERIODS, SEQ_WINDOW, statId, type Counter } from "../../lib/stat-buckets";
import type { StatsApplied, StatsIncrement } from "../../lib/contracts";

/**
 * Stats documents belong to the tenant whose documents they count: `owner` and `clients` are that client id, so a
 * client token sees them in its own zone and a user of the client with `zone=client`. Counts of documents with no
 * client (none in practice) go to owner `platform` with empty `clients`, visible through no zone.
 */
const PLATFORM_OWNER = "platform";
const LEASE_TTL_MS = 10_000;
const LEASE_WAIT_MS = 15_000;

export function validIncrement(p: StatsIncrement): StatsIncrement {
	if (!p || !Number.isFinite(p.seq) || typeof p.service !== "string" || typeof p.collection !== "string" || !COUNTERS.includes(p.counter) || !Number.isFinite(p.ts_ms))
		throw badRequest("seq, service, collection, counter and ts_ms are required");
	return p;
}

/**
 * One tenant's increments of one collection, in the order given. On PostgreSQL each bucket write commits at once,
 * inside the lease (flushUnit; a no-op outside a unit): the next holder of the lease reads it and adds on top instead of
 * inserting the same bucket again, which failed on the unique id and aborted the caller's transaction (a 500).
 */
async function bump(store: DocumentStore, client: string, items: StatsIncrement[]): Promise<StatsApplied> {
	const out: StatsApplied = { applied: 0, skipped: 0 };
	const owner = client || PLATFORM_OWNER;
	const { service, collection } = items[0];
	for (const period of PERIODS) {
		const buckets = new Map<string, StatsIncrement[]>();
		for (const p of items) {
			const b = bucketOf(period, p.ts_ms);
			const list = buckets.get(b);
			if (list) list.push(p);
			else buckets.set(b, [p]);
		}
		for (const [bucket, group] of buckets) {
			const id = statId(client, service, collection, period, bucket);
			for (let attempt = 0; ; attempt++) {
				const doc = await store.findOne({ id });
				const seen = new Set(doc && Array.isArray(doc.seqs) ? (doc.seqs as number[]) : []);
				const sums = Object.fromEntries(COUNTERS.map((c) => [c, 0])) as Record<Counter, number>;
				const added: number[] = [];
				for (const p of group) {
					if (seen.has(p.seq)) {
						out.skipped++;
						continue;
					}
					seen.add(p.seq);
					added.push(p.seq);
					sums[p.counter]++;
				}
				if (!added.length) break;
				if (doc) {
					const set: Record<string, unknown> = {
						seqs: [...((doc.seqs as number[]) ?? []), ...added].slice(-SEQ_WINDOW),
						updated_at: new Date().toISOString(),
						updated_by: owner,
						updated_in: owner,
						timestamp: String(Date.now()),
					};
					for (const c of COUNTERS) if (sums[c]) set[c] = (Number(doc[c]) || 0) + sums[c];
					await store.setOne(id, set);
					await flushUnit();
					out.applied += added.length;
					break;
				}
				const fresh = platformDoc({ service, collection, period, bucket, ...sums, seqs: added.slice(-SEQ_WINDOW) }, { owner, cid: owner });
				fresh.id = id;
				if (!client) fresh.clients = [];
				try {
					await store.insert(fresh);
					await flushUnit();
					out.applied += added.length;
					break;
				} catch (err) {
					// Another node created the bucket first: count on top of its document.
					if (!isDuplicateKeyError(err) || attempt > 0) throw err;
					// PostgreSQL: the failed insert ended the unit's transaction (only this bucket's insert was in it);
					// the retry reads in a new one.
					await flushUnit();
				}
			}
		}
	}
	return out;
}

/** Applies the increments of a batch: grouped per tenant and collection, one lease and one write per bucket each. */
export async function applyIncrements(store: DocumentStore, kv: KeyValue, increments: StatsIncrement[]): Promise<StatsApplied> {
	const groups = new Map<string, { client: string; items: StatsIncrement[] }>();
	for (const p of increments) {
		const listed = Array.isArray(p.clients) ? [...new Set(p.clients.filter((c) => typeof c === "string" && c))] : [];
		for (const client of listed.length ? listed : [""]) {
			const key = `special:stats:${client}:${p.service}.${p.collection}`;
			const g = groups.get(key) ?? { client, items: [] };
			g.items.push(p);
			groups.set(key, g);
		}
	}
	const total: StatsApplied = { applied: 0, skipped: 0 };
	for (const [key, g] of groups) {
		const r = await withLease(kv, key, LEASE_TTL_MS, LEASE_WAIT_MS, () => bump(store, g.client, g.items));
		total.applied += r.applied;
		total.skipped += r.skipped;
	}
	return total;
}
