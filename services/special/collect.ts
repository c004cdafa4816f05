/**
 * special/stats `collect` (docs/contracts.md "Other special actions"): the caller's tenant's statistics (special/stats,
 * written by the observer, see lib/stat-buckets.ts) summed over a range of buckets of one period, per service
 * and collection. The tenant is the token's client (`cid`); the documents are read through the caller's view too
 * (zones and grant rows). Stats are owned by the tenant's client, so the view's default zone here is `client` (a
 * user of the tenant reads its tenant's stats without asking); a `zone` the caller gives (`?zone=`, `x-zone`) is kept.
 */
import { findCollection, DOMAINS } from "../../catalog";
import { badRequest } from "../../lib/errors";
import { requirePlan } from "../../lib/plan";
import { isPlainObject } from "../../lib/validate";
import { and, callerView } from "../../authority/authority";
import type { Ctx } from "../../engine/collection.mixin";
import type { DocumentStore } from "../../stores";
import { bucketOf, COUNTERS, PERIODS, type Period } from "../../lib/stat-buckets";

const BATCH = 500;
const FIELDS = ["service", "collection", "period", "from", "to"];

export interface CollectedStat {
	service: string;
	collection: string;
	period: Period;
	/** First and last bucket counted. */
	from: string;
	to: string;
	created: number;
	updated: number;
	deleted: number;
	restored: number;
}

function boundOf(name: string, v: unknown, period: Period): string | undefined {
	if (v === undefined || v === null) return undefined;
	const ms = typeof v === "string" && /^\d{4}(-\d{2}(-\d{2}([T ].*)?)?)?$/.test(v) ? Date.parse(v) : NaN;
	if (Number.isNaN(ms)) throw badRequest(`${name} must be a date: YYYY, YYYY-MM, YYYY-MM-DD or ISO 8601`);
	return bucketOf(period, ms);
}

export function parseCollect(body: unknown): { period: Period; service?: string; collection?: string; from?: string; to?: string } {
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	const extra = Object.keys(body).find((k) => !FIELDS.includes(k));
	if (extra) throw badRequest(`${extra} is not allowed`);
	const period = body.period as Period;
	if (period === undefined) throw badRequest("period is required");
	if (!PERIODS.includes(period)) throw badRequest(`period must be one of ${PERIODS.join(", ")}`);
	const { service, collection } = body;
	if (service !== undefined && (typeof service !== "string" || !DOMAINS.some((d) => d.name === service))) throw badRequest(`service ${String(service)} does not exist`);
	if (collection !== undefined) {
		const known =
			typeof collection === "string" && (service ? !!findCollection(service as string, collection) : DOMAINS.some((d) => d.collections.some((c) => c.name === collection)));
		if (!known) throw badRequest(`collection ${String(collection)} does not exist${service ? ` in ${String(service)}` : ""}`);
	}
	const from = boundOf("from", body.from, period);
	const to = boundOf("to", body.to, period);
	if (from && to && from > to) throw badRequest("from must not be after to");
	return { period, service: service as string | undefined, collection: collection as string | undefined, from, to };
}

/** The caller's view of special/stats: the plan the authority layer made, or, when the caller named no zone, the `client` zone's. */
async function statsView(ctx: Ctx) {
	const query = (ctx.params.query ?? {}) as Record<string, unknown>;
	if (query.zone !== undefined || ctx.meta.headers?.["x-zone"] !== undefined) return requirePlan(ctx.locals);
	const view = Object.assign(Object.create(ctx) as Ctx, { params: { ...ctx.params, query: { ...query, zone: "client" } } });
	return callerView(view, "special", "stats", "collect");
}

export async function collect(ctx: Ctx): Promise<{ items: CollectedStat[]; total: number }> {
	const plan = await statsView(ctx);
	const b = parseCollect(ctx.params.body);
	const store = (ctx.service as unknown as { collectionStore(n: string): DocumentStore }).collectionStore("stats");
	const range: Record<string, string> = {};
	if (b.from) range.$gte = b.from;
	if (b.to) range.$lte = b.to;
	const cond: Record<string, unknown> = {
		clients: plan.token.cid,
		period: b.period,
		...(b.service ? { service: b.service } : {}),
		...(b.collection ? { collection: b.collection } : {}),
		...(Object.keys(range).length ? { bucket: range } : {}),
	};
	const sums = new Map<string, CollectedStat>();
	let last = "";
	for (;;) {
		const batch = await store.find({ query: and([plan.filter, cond, ...(last ? [{ id: { $gt: last } }] : [])]), sort: { id: 1 }, limit: BATCH });
		for (const d of batch) {
			const key = `${d.service}\u0000${d.collection}`;
			let s = sums.get(key);
			if (!s)
				sums.set(
					key,
					(s = {
						service: String(d.service),
						collection: String(d.collection),
						period: b.period,
						from: String(d.bucket),
						to: String(d.bucket),
						created: 0,
						updated: 0,
						deleted: 0,
						restored: 0,
					}),
				);
			for (const c of COUNTERS) s[c] += Number(d[c]) || 0;
			if (String(d.bucket) < s.from) s.from = String(d.bucket);
			if (String(d.bucket) > s.to) s.to = String(d.bucket);
		}
		if (batch.length < BATCH) break;
		last = batch[batch.length - 1].id;
	}
	const sorted = [...sums.values()].sort((x, y) => (x.service + "/" + x.collection < y.service + "/" + y.collection ? -1 : 1));
	// A field the grant hides is not answered as a sum either (`from`/`to` come from `bucket`).
	const allowed = plan.fields;
	const items = allowed
		? sorted.map((it) => Object.fromEntries(Object.entries(it).filter(([k]) => allowed.includes(k === "from" || k === "to" ? "bucket" : k))) as unknown as CollectedStat)
		: sorted;
	return { items, total: items.length };
}
