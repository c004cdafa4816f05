/**
 * The `search` special of content/posts, career/products, conjoint/messages (and the text form of
 * logistic/locations `resolve`): see docs/search.md.
 *
 * Index upkeep: each node holds its own in-memory index per searchable collection (lib/search.ts). At start it is
 * built from the document store (so it survives a restart), then it follows the change stream's source, the durable
 * outbox, from a position taken before the build: every create, patch, bulk patch, soft delete, restore, destroy and
 * purge of any node reaches every node's index (the same process: at once, on the outbox's `appended` signal; other
 * nodes sharing the store: within one poll, 500 ms). It reads the outbox directly rather than as a consumer group,
 * because each node needs every event (a group hands each event to one member only) and a per-node group would hold
 * the outbox back forever after the node is gone. Replaying an event is harmless: the last image wins.
 *
 * Reading: the index matches, the store decides, the view ranks. The matching ids are checked against the store through
 * the caller's view (plan.filter: zones, the grant's rows, soft delete, the caller's `query`), so a document outside the
 * view never appears and `total` counts visible matches only; then the visible ones are ranked with statistics of those
 * documents only (CollectionIndex.rank), so a document outside the view changes no score either. Matching runs only
 * over the text fields the caller's grant may read.
 */
import type { ServiceSchema } from "moleculer";
import type { CollectionDef, DomainDef } from "../../catalog";
import { configOf } from "../../runtime/config";
import { badRequest } from "../../lib/errors";
import { requirePlan, type AccessPlan } from "../../lib/plan";
import { present } from "../../lib/present";
import { parsePagination } from "../../lib/query-safety";
import { CollectionIndex, parseQueryText, searchableFor, type Hit } from "../../lib/search";
import { and } from "../../authority/authority";
import type { Ctx, EngineService } from "../../engine/collection.mixin";
import { asSchema } from "../../lib/service";
import { sharedOutbox, type Outbox, type OutboxRecord } from "../../events/outbox";
import type { DocumentStore, StoredDoc } from "../../stores";

const BUILD_BATCH = 1000;
const TAIL_BATCH = 500;
/** The tail looks again after this even without a signal (the outbox's feed signals every record it reads). */
const POLL_MS = 5000;
/**
 * The tail starts this far before the build's first read: events racing the build are replayed (harmless). On
 * PostgreSQL it starts at the newest position read before the build instead.
 */
const START_MARGIN_MS = 2000;
/** The longest a search waits for the tail to reach a change this node appended before it. */
const CATCH_UP_MS = 2000;
/** Candidate ids checked against the caller's view per store query. */
const CHECK_BATCH = 500;

interface SearchState {
	indexes: Map<string, CollectionIndex>;
	ready: Promise<void>;
	outbox?: Outbox;
	stop?: () => Promise<void>;
	/** Resolves once the index holds every change of its collections appended on this node so far (read your writes). */
	caughtUp?: () => Promise<void>;
}

/** A searchable service's `this` (lib/service.ts): the engine's methods and its indexes once started. */
type Svc = EngineService & { $search: SearchState };

async function build(store: DocumentStore, index: CollectionIndex): Promise<void> {
	index.clear();
	let last = "";
	for (;;) {
		const query: Record<string, unknown> = last ? { deleted_at: null, id: { $gt: last } } : { deleted_at: null };
		const batch = await store.find({ query, sort: { id: 1 }, limit: BUILD_BATCH });
		for (const d of batch) index.upsert(d);
		if (batch.length < BUILD_BATCH) return;
		last = batch[batch.length - 1].id;
	}
}

function apply(indexes: Map<string, CollectionIndex>, topics: Map<string, string>, rec: OutboxRecord): void {
	const ev = rec.event;
	const name = ev && topics.get(ev.topic);
	if (!name) return;
	const index = indexes.get(name)!;
	if (ev.op === "d" || !ev.after) index.remove(String(ev.id));
	else index.upsert(ev.after);
}

/**
 * Mixin of a domain service: indexes of `names` built at start and kept from the outbox. Placed after the collection
 * mixin in `mixins`, so its `started` runs once the stores are connected.
 */
export function searchableMixin(domain: DomainDef, names: string[]): Partial<ServiceSchema> {
	const cols = names.map((n) => domain.collections.find((c) => c.name === n)!);
	return asSchema<Svc>({
		methods: {
			/** The collection's index on this node, once built. */
			async searchIndex(this: Svc, name: string): Promise<CollectionIndex> {
				await this.$search.ready;
				await this.$search.caughtUp?.();
				return this.$search.indexes.get(name)!;
			},
		},
		async started(this: Svc) {
			const indexes = new Map(cols.map((c) => [c.name, new CollectionIndex(c)]));
			const topics = new Map(cols.map((c) => [`${domain.name}.${c.name}`, c.name]));
			const outbox = sharedOutbox(configOf(this.broker));
			const state: SearchState = { indexes, ready: Promise.resolve(), outbox };
			this.$search = state;
			// Positions are microsecond timestamps, except on PostgreSQL: there they come from a sequence, in commit order,
			// so the newest one read before the build is where the tail starts (see below).
			let position = (Date.now() - START_MARGIN_MS) * 1000;
			let stopped = false;
			let wake: (() => void) | undefined;
			// New records signalled (the outbox's `readable`: its feed read records of any node; under load the appends made
			// while a batch is indexed are read as the next batch): the next wait ends at once.
			let signalled = false;
			// The newest position of a change to these collections appended on this node, and the searches waiting for
			// the tail to pass it: the write was answered, so a search that follows it must find it, not race the read.
			let mine = 0;
			let waiting: Array<{ at: number; done: () => void }> = [];
			const passed = () => {
				if (!waiting.length) return;
				const still: typeof waiting = [];
				for (const w of waiting) {
					if (w.at > position && !stopped) still.push(w);
					else w.done();
				}
				waiting = still;
			};
			state.caughtUp = () => {
				if (position >= mine || stopped) return Promise.resolve();
				const at = mine;
				return new Promise<void>((resolve) => {
					// Bounded: a tail that cannot read (the store is down) answers from the index as it is.
					const timer = setTimeout(() => {
						waiting = waiting.filter((x) => x !== w);
						resolve();
					}, CATCH_UP_MS).unref();
					const w = {
						at,
						done: () => {
							clearTimeout(timer);
							resolve();
						},
					};
					waiting.push(w);
				});
			};
			const onAppended = (recs: OutboxRecord[]) => {
				for (const r of recs) if (r.event && topics.has(r.event.topic) && r.seq > mine) mine = r.seq;
			};
			const onReadable = () => {
				signalled = true;
				wake?.();
			};
			state.ready = (async () => {
				await outbox.connect();
				if (outbox.transactional) position = await outbox.head();
				outbox.setMaxListeners(outbox.getMaxListeners() + 2);
				outbox.on("appended", onAppended);
				outbox.on("readable", onReadable);
				for (const c of cols) await build(this.collectionStore(c.name), indexes.get(c.name)!);
			})();
			await state.ready;
			const loop = (async () => {
				while (!stopped) {
					let batch: OutboxRecord[] = [];
					signalled = false;
					try {
						batch = await outbox.readFed(position, TAIL_BATCH);
					} catch {
						batch = [];
					}
					for (const rec of batch) {
						apply(indexes, topics, rec);
						position = rec.seq;
					}
					passed();
					if (batch.length === TAIL_BATCH || stopped) continue;
					await new Promise<void>((resolve) => {
						if (signalled || stopped) return resolve();
						const t = setTimeout(done, POLL_MS);
						function done() {
							clearTimeout(t);
							wake = undefined;
							resolve();
						}
						wake = done;
					});
				}
			})();
			state.stop = async () => {
				stopped = true;
				wake?.();
				passed();
				await loop;
				outbox.off("appended", onAppended);
				outbox.off("readable", onReadable);
				outbox.setMaxListeners(Math.max(10, outbox.getMaxListeners() - 2));
				await outbox.disconnect();
			};
		},
		async stopped(this: Svc) {
			await this.$search?.stop?.();
		},
	});
}

/**
 * The ids among `ids` inside the caller's view (every candidate is checked, so `total` is exact). Per batch a count
 * first: when the view holds all of the batch or none of it (the usual cases), no document is read or copied; only a
 * mixed batch is read to tell which.
 */
export async function visibleIds(store: DocumentStore, plan: AccessPlan, ids: string[]): Promise<string[]> {
	const out: string[] = [];
	for (let i = 0; i < ids.length; i += CHECK_BATCH) {
		const chunk = ids.slice(i, i + CHECK_BATCH);
		const query = and([plan.filter, { id: { $in: chunk } }]);
		const n = await store.count(query);
		if (n === 0) continue;
		if (n === chunk.length) {
			out.push(...chunk);
			continue;
		}
		const seen = new Set((await store.find({ query })).map((d) => d.id));
		for (const id of chunk) if (seen.has(id)) out.push(id);
	}
	return out;
}

const round = (n: number) => Math.round(n * 1e6) / 1e6;

type SearchSvc = Svc & { searchIndex(name: string): Promise<CollectionIndex> };

/** The caller's visible matches of `text`, best first, scored over those documents only (docs/search.md, "Scores"). */
async function rankedInView(ctx: Ctx, col: CollectionDef, text: string): Promise<{ hits: Hit[]; store: DocumentStore; plan: AccessPlan }> {
	const plan = requirePlan(ctx.locals);
	const svc = ctx.service as SearchSvc;
	const index = await svc.searchIndex(col.name);
	const store = svc.collectionStore(col.name);
	const fields = searchableFor(index.fields, plan.fields);
	const candidates = index.matches(text, fields);
	const hits = candidates.length ? index.rank(text, fields, await visibleIds(store, plan, candidates)) : [];
	return { hits, store, plan };
}

/** The search special of one collection: `GET /<service>/<collection>/search?q=...&pagination=...`. */
export function searchHandler(col: CollectionDef) {
	return async function search(ctx: Ctx): Promise<{ items: Record<string, unknown>[]; total: number }> {
		const q = (ctx.params.query ?? {}) as Record<string, unknown>;
		const text = parseQueryText(q.q);
		const page = parsePagination(q.pagination);
		if (page.sort) throw badRequest("pagination.sort is not allowed in a search: results are ranked by relevance");
		const { hits, store, plan } = await rankedInView(ctx, col, text);
		const pageHits = hits.slice(page.skip, page.skip + page.limit);
		if (!pageHits.length) return { items: [], total: hits.length };
		const docs = await store.find({ query: and([plan.filter, { id: { $in: pageHits.map((h) => h.id) } }]) });
		const byId = new Map<string, StoredDoc>(docs.map((d) => [d.id, d]));
		const items = pageHits.filter((h) => byId.has(h.id)).map((h) => ({ ...present(col, byId.get(h.id)!, plan.fields), score: round(h.score) }));
		return { items, total: hits.length };
	};
}

/** The best visible match of `q` (logistic/locations `resolve` with `{ query }`), or null. */
export async function bestMatch(ctx: Ctx, col: CollectionDef, text: string): Promise<{ doc: StoredDoc; score: number } | null> {
	const { hits, store, plan } = await rankedInView(ctx, col, text);
	// In rank order: the first still in the view (a write may have raced the check) is the answer.
	for (const h of hits) {
		const doc = await store.findOne(and([plan.filter, { id: h.id }]));
		if (doc) return { doc, score: h.score };
	}
	return null;
}
