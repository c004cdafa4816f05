/**
 * The collection engine's actions: the eleven standard handlers of one collection (count, list, cursor, get, create,
 * bulkCreate, patch, bulkPatch, remove, restore, destroy) and the cleaner's purge. They execute the access plan the
 * authority middleware attached (ctx.locals.plan) and never decide access themselves; every write appends its change
 * events to the outbox, and a routed by-id write honours `If-Match`.
 */
import { createHash } from "crypto";
import { DEFAULT_VERSION, type CollectionDef, type DomainDef, type StandardOp } from "../catalog";
import { changeEvent, type ChangeEvent } from "../lib/change-event";
import { configOf } from "../runtime/config";
import { objectId, randomHelper } from "../lib/crypto";
import { ApiError, badRequest, conflict, notFound } from "../lib/errors";
import { requirePlan, type AccessPlan } from "../lib/plan";
import { present } from "../lib/present";
import { identityOf, servesRequest, type TokenClaims, type Doc } from "../lib/types";
import { checkRules, isPlainObject, validateBody } from "../lib/validate";
import { isDuplicateKeyError, pageOf, TENANT_REF, tenantRef, type DocumentStore, type Keyset, type StoredDoc } from "../stores";
import { MAX_EXAMINED } from "../lib/query-safety";
import { keptAnswer } from "./answer-cache";
import { fenceChanges, markShownOnce } from "./idempotency-record";
import { stagingStore } from "./saga-staging";
import { matches, noneMatchHits, parseIfMatch, pinned, preconditionFailed, tagOf, weakTagOf } from "../stores/revision";
import { actionName, BATCH, MAX_BULK, type Change, type CollectionHooks, type CollectionParams, type Ctx, type PurgeParams, type Recorders } from "./collection-contract";
import { actorOf, clientsOf, inGrant, keyRef, stamp, touches } from "./document";
import { state } from "./collection-lifecycle";

/** Internal identity action: which of these ids are neither live users of the tenants nor the tenants' clients. */
export const USERS_OUTSIDE_TENANT = "identity.users.outsideTenant";

/**
 * `shares` names users of the caller's tenant only (docs/contracts.md "Tenants"): the tenant of the caller's user, the
 * client of its token and the coworkers the token acts for (where the document lands), or those clients themselves.
 * One call for every id of the request, none when no `shares` is given.
 */
export async function assertShares(ctx: Ctx, token: TokenClaims, lists: unknown[]): Promise<void> {
	const ids = [...new Set(lists.flatMap((l) => (Array.isArray(l) ? l : [])).map(String))];
	if (!ids.length) return;
	const { outside } = await ctx.call<{ outside: string[] }, { tenants: string[]; uid?: string; ids: string[] }>(USERS_OUTSIDE_TENANT, {
		tenants: clientsOf(token),
		uid: token.uid,
		ids,
	});
	if (outside.length) throw badRequest(`shares: ${outside[0]} is not a user of this tenant`);
}

/** The gateway's own call (an HTTP request): its conditional headers and answer headers are this action's. */
export const routed = (ctx: Pick<Ctx, "caller">) => ctx.caller === "api";

/** `store` under the request's deadline (REQUEST_DB_DEADLINE_MS) when `ctx` serves a client's request. */
function forRequest(ctx: Ctx, store: DocumentStore): DocumentStore {
	return servesRequest(ctx.meta) ? (store.within?.(configOf(ctx.broker).requestDbDeadlineMs) ?? store) : store;
}

/** Sets an answer header of a routed call (kept with the others, e.g. a saga's). */
function answerHeader(ctx: Ctx, name: string, value: string): void {
	if (routed(ctx)) ctx.meta.$responseHeaders = { ...(ctx.meta.$responseHeaders as Record<string, string> | undefined), [name]: value };
}

/**
 * Runs a write of the document `doc` of a by-id route under the request's `If-Match` (docs/contracts.md "Retries and
 * concurrent writers"): 412 `precondition failed` when the document's tag is not one listed, and the write's first
 * store write to the document conditional on the revision compared (stores/revision.ts), so a writer in
 * between answers 412 too and nothing changes. Without the header (or from a call that is not the request's), the
 * write as it is.
 */
export function ifMatch<T>(ctx: Ctx, store: DocumentStore, doc: StoredDoc, write: () => Promise<T>): Promise<T> {
	const cond = routed(ctx) ? parseIfMatch(ctx.meta.headers?.["if-match"]) : undefined;
	if (!cond) return write();
	if (!matches(cond, doc)) throw preconditionFailed();
	return cond.any ? write() : pinned(store, doc, write);
}

/**
 * The standard handlers of the collection `col` of `domain`, with its hooks. Registers the collection's change
 * recorder in `recorders` (the mixin's `recordChanges`, settlement and purge record through it).
 */
export function collectionHandlers(domain: DomainDef, hooks: Record<string, CollectionHooks>, recorders: Recorders, col: CollectionDef) {
	const h = hooks[col.name] ?? {};
	// A write carrying x-saga-session goes through the staging store (engine/saga-staging.ts). A call that serves a
	// client's request reads and writes under the request's deadline (reads run without a unit, which carries it for
	// writes: stores/unit.middleware.ts).
	const store = (ctx: Ctx) => stagingStore(ctx, forRequest(ctx, state(ctx.service).stores.get(col.name)!));
	/** The collection's own (revisioned) store, which `If-Match` pins a document of. */
	const own = (ctx: Ctx) => state(ctx.service).stores.get(col.name)!;
	/** A write of `before` under the request's If-Match; the answer carries the document's new tag. */
	const guarded = async (ctx: Ctx, before: StoredDoc, write: () => Promise<StoredDoc | null>): Promise<StoredDoc> => {
		const after = await ifMatch(ctx, own(ctx), before, write);
		if (!after) throw notFound();
		answerHeader(ctx, "ETag", tagOf(after));
		return after;
	};

	/**
	 * The soft delete or destroy `write` of the document `before`, after `beforeRemove` accepted it: pinned to the
	 * revision the hook saw, so a document changed since (money moved in) is never removed on an outdated answer. A
	 * writer in between makes the hook look at the document again, at most 3 times (then 409); with the caller's own
	 * `If-Match`, its 412 stands.
	 */
	async function removal<T>(ctx: Ctx, plan: AccessPlan, op: "remove" | "destroy", before: StoredDoc, write: (doc: StoredDoc) => Promise<T>): Promise<{ doc: StoredDoc; res: T }> {
		if (!h.beforeRemove) return { doc: before, res: await write(before) };
		const callerPinned = routed(ctx) && ctx.meta.headers?.["if-match"] !== undefined;
		for (let doc = before, tries = 1; ; tries++) {
			await h.beforeRemove(ctx, doc, op);
			try {
				return { doc, res: await pinned(own(ctx), doc, () => write(doc)) };
			} catch (err) {
				if ((err as ApiError).code !== 412 || callerPinned) throw err;
				if (tries === 3) throw conflict(`document ${doc.id} kept changing while it was being removed; try again`);
			}
			doc = await target(ctx, plan);
		}
	}

	function out(doc: StoredDoc, plan: AccessPlan): Doc {
		const d = present(col, doc, plan.fields);
		return h.redact ? h.redact(d) : d;
	}

	function redacted(ev: ChangeEvent): ChangeEvent {
		if (!h.redact) return ev;
		if (ev.after) ev.after = h.redact(ev.after);
		if (ev.before) ev.before = h.redact(ev.before);
		return ev;
	}

	async function record(ctx: Ctx, changes: Change[], svc: unknown = ctx.service) {
		await append(ctx, changes, svc);
		await afterWrites(ctx, changes);
	}

	/** The change events of `changes`, appended to the outbox (on PostgreSQL: committed with the unit's writes). */
	async function append(ctx: Ctx, changes: Change[], svc: unknown = ctx.service) {
		// A keyed request's record is marked committed in the same unit of work (engine/idempotency-record.ts).
		await fenceChanges(
			ctx,
			state(svc).idempotency,
			`${domain.name}/${col.name}`,
			changes.map((c) => (c.after ?? c.before)!.id),
		);
		const ts = Date.now();
		await state(svc).outbox.append(
			changes.map(({ op, before, after }) => {
				const doc = (after ?? before)!;
				return {
					event: redacted(changeEvent(op, domain, col, before, after, ts)),
					clients: (doc.clients as string[]) ?? [],
					owner: doc.owner as string | undefined,
					shares: (doc.shares as string[]) ?? [],
					actor: actorOf(ctx),
				};
			}),
		);
	}

	async function afterWrites(ctx: Ctx, changes: Change[]) {
		if (h.afterWrite) for (const c of changes) await h.afterWrite(ctx, c.op, c.before, c.after);
	}

	/**
	 * New documents and their change events. The insert may be held back and written by the outbox's append, in one
	 * statement (PostgreSQL, stores/unit.ts): its duplicate key surfaces from either, the same 409.
	 */
	async function create(ctx: Ctx, docs: StoredDoc[]) {
		const changes = docs.map((after) => ({ op: "c" as const, before: null, after }));
		await insert(async () => {
			const s = store(ctx);
			if (docs.length === 1) await s.insert(keyRef(docs[0]), { hold: true });
			else await s.insertMany(docs.map(keyRef), { hold: true });
			await append(ctx, changes);
		});
		await afterWrites(ctx, changes);
	}

	function writable(op: string) {
		if (col.platformWritten) throw new ApiError(405, `${domain.name}/${col.name} is written by the platform only`);
		return op;
	}

	async function build(ctx: Ctx, plan: AccessPlan, body: unknown, prefix = ""): Promise<{ doc: StoredDoc; extra: Record<string, unknown> }> {
		const clean = validateBody(col, body, "create", prefix);
		const now = new Date().toISOString();
		const t = plan.token;
		const doc: StoredDoc = {
			id: objectId(),
			shares: [],
			groups: [],
			...clean,
			version: (clean.version as string) ?? DEFAULT_VERSION,
			owner: identityOf(t),
			clients: clientsOf(t),
			...stamp("created", t, now),
			...stamp("updated", t, now),
			deleted_at: null,
			rand: randomHelper(12),
			timestamp: String(Date.now()),
		};
		const extra = (await h.beforeCreate?.(ctx, doc)) ?? {};
		return { doc, extra };
	}

	async function insert<T>(fn: () => Promise<T>): Promise<T> {
		try {
			return await fn();
		} catch (err) {
			if (isDuplicateKeyError(err)) throw conflict("ref already exists");
			throw err;
		}
	}

	/** The one document a by-id operation addresses, inside the caller's view; 404 otherwise. */
	async function target(ctx: Ctx, plan: AccessPlan): Promise<StoredDoc> {
		const doc = await store(ctx).findOne(plan.filter);
		if (!doc) throw notFound();
		return doc;
	}

	async function populate(ctx: Ctx, plan: AccessPlan, docs: Doc[]): Promise<Doc[]> {
		for (const spec of plan.populate) {
			const rel = col.fields[spec.path]?.relation;
			if (!rel) continue;
			const [svc, target] = rel.split("/");
			const ids = [...new Set(docs.flatMap((d) => ([] as unknown[]).concat(d[spec.path] ?? [])).filter((x): x is string => typeof x === "string"))];
			const found = new Map<string, Doc>();
			for (let i = 0; i < ids.length; i += 100) {
				const chunk = ids.slice(i, i + 100);
				const query = { ...(spec.match ? (jsonQuery(spec.match) as Record<string, unknown>) : {}), id: { $in: chunk } };
				const res = await ctx.call<{ items: Doc[] }, CollectionParams>(`${svc}.${actionName(target, "list")}`, {
					query: { query, pagination: { limit: 100 }, ...(spec.select ? { projection: Object.fromEntries(spec.select.map((f) => [f, 1])) } : {}) },
				});
				for (const d of res.items) found.set(d.id, d);
			}
			for (const d of docs) {
				const v = d[spec.path];
				if (Array.isArray(v)) d[spec.path] = v.map((id) => found.get(id as string)).filter(Boolean);
				else if (typeof v === "string") d[spec.path] = found.get(v) ?? null;
			}
		}
		return docs;
	}

	const findOptions = (plan: AccessPlan, skip: number, limit: number) => ({
		query: plan.filter,
		sort: plan.sort ?? { id: 1 },
		skip,
		limit,
		projection: plan.projection,
		examine: MAX_EXAMINED,
	});

	async function read(ctx: Ctx, plan: AccessPlan, skip: number, limit: number): Promise<Doc[]> {
		const docs = await store(ctx).find(findOptions(plan, skip, limit));
		return populate(
			ctx,
			plan,
			docs.map((d) => out(d, plan)),
		);
	}

	recorders.set(col.name, record);
	const handlers: Record<StandardOp, (ctx: Ctx) => Promise<unknown>> = {
		async count(ctx) {
			const plan = requirePlan(ctx.locals);
			return { total: await store(ctx).count(plan.filter, { examine: MAX_EXAMINED }) };
		},
		async list(ctx) {
			const plan = requirePlan(ctx.locals);
			// Page and total from one evaluation of the filter where the store can (the total counts every match anyway).
			const { docs, total } = await pageOf(store(ctx), findOptions(plan, plan.skip, plan.limit));
			return {
				items: await populate(
					ctx,
					plan,
					docs.map((d) => out(d, plan)),
				),
				total,
			};
		},
		async cursor(ctx) {
			const plan = requirePlan(ctx.locals);
			const page = ctx.params.page ?? { offset: 0, size: plan.limit };
			const size = Math.min(page.size, 500);
			const s = store(ctx);
			if (!s.findAfter) return { items: await read(ctx, plan, plan.skip + page.offset, size) };
			// Each page starts after the last document of the one before (a keyset), which travels back to the gateway
			// in the call's meta and comes again with its next call: a page costs its own size, never the pages before.
			const meta = ctx.meta as unknown as { cursorKeyset?: CursorKeyset };
			const mark = cursorMark(ctx.action?.name, plan);
			const held = meta.cursorKeyset;
			const after = page.offset > 0 && held?.mark === mark && held.offset === page.offset ? held.after : undefined;
			const { docs, next } = await s.findAfter({ ...findOptions(plan, after ? 0 : plan.skip + page.offset, size), after });
			meta.cursorKeyset = next && { mark, offset: page.offset + docs.length, after: next };
			return {
				items: await populate(
					ctx,
					plan,
					docs.map((d) => out(d, plan)),
				),
			};
		},
		async get(ctx) {
			const plan = requirePlan(ctx.locals);
			const s = store(ctx);
			// A client's read that populates nothing may answer from the document cache (engine/answer-cache.ts): its
			// answer is a function of the document and the readable fields, decided above for this caller.
			const stored = routed(ctx) && !plan.populate.length && s.findOneCached ? await s.findOneCached(plan.filter) : await s.findOne(plan.filter);
			if (!stored) throw notFound();
			const kept = Object.isFrozen(stored) ? keptAnswer(stored, plan.fields, () => ({ body: { data: out(stored, plan) }, tag: tagOf(stored) })) : undefined;
			const [doc] = kept ? [kept.body.data] : await populate(ctx, plan, [out(stored, plan)]);
			// The document's tag; with `populate`, a weak one that also covers the populated values. If-None-Match naming
			// it: 304, no body (decided here, not by moleculer-web's `fresh`, which ignores it beside `Cache-Control:
			// no-cache`, as fetch clients send it with every conditional request).
			const tag =
				kept?.tag ??
				(plan.populate.length
					? weakTagOf(
							stored,
							plan.populate.map((p) => doc[p.path]),
						)
					: tagOf(stored));
			answerHeader(ctx, "ETag", tag);
			if (routed(ctx) && noneMatchHits(ctx.meta.headers?.["if-none-match"], tag)) {
				ctx.meta.$statusCode = 304;
				return null;
			}
			return kept?.body ?? { data: doc };
		},
		async create(ctx) {
			const plan = requirePlan(ctx.locals);
			writable("create");
			const { doc, extra } = await build(ctx, plan, ctx.params.body);
			inGrant(plan, [doc]);
			await assertShares(ctx, plan.token, [doc.shares]);
			await create(ctx, [doc]);
			if (Object.keys(extra).length) markShownOnce(ctx);
			return { data: { ...out(doc, plan), ...extra } };
		},
		async bulkCreate(ctx) {
			const plan = requirePlan(ctx.locals);
			writable("bulk");
			const body = ctx.params.body;
			if (!isPlainObject(body) || !Array.isArray(body.items)) throw badRequest("items must be an array");
			if (Object.keys(body).some((k) => k !== "items")) throw badRequest(`${Object.keys(body).find((k) => k !== "items")} is not allowed in a bulk body`);
			if (body.items.length === 0) throw badRequest("items must not be empty");
			if (body.items.length > MAX_BULK) throw badRequest(`items accepts at most ${MAX_BULK} documents`);
			const built: Array<{ doc: StoredDoc; extra: Record<string, unknown> }> = [];
			for (let i = 0; i < body.items.length; i++) built.push(await build(ctx, plan, body.items[i], `items[${i}].`));
			const refs = built.map((b) => b.doc.ref).filter((r) => r !== undefined);
			if (new Set(refs).size !== refs.length) throw conflict("ref already exists");
			inGrant(
				plan,
				built.map((b) => b.doc),
			);
			await assertShares(
				ctx,
				plan.token,
				built.map((b) => b.doc.shares),
			);
			await create(
				ctx,
				built.map((b) => b.doc),
			);
			if (built.some((b) => Object.keys(b.extra).length)) markShownOnce(ctx);
			return { items: built.map((b) => ({ ...out(b.doc, plan), ...b.extra })), total: built.length };
		},
		async patch(ctx) {
			const plan = requirePlan(ctx.locals);
			writable("patch");
			const clean = validateBody(col, ctx.params.body, "patch");
			const before = await target(ctx, plan);
			const set: Record<string, unknown> = { ...clean, ...stamp("updated", plan.token, new Date().toISOString()) };
			const after = await guarded(ctx, before, async () => {
				await h.beforePatch?.(ctx, set, before);
				checkRules(col, { ...before, ...set });
				inGrant(plan, [{ ...before, ...set }]);
				await assertShares(ctx, plan.token, [set.shares]);
				if ("ref" in set) set[TENANT_REF] = tenantRef(before.clients, set.ref);
				return insert(() => store(ctx).setOne(before.id, set));
			});
			await record(ctx, [{ op: "u", before, after }]);
			return { data: out(after, plan) };
		},
		async bulkPatch(ctx) {
			const plan = requirePlan(ctx.locals);
			writable("patch");
			const clean = validateBody(col, ctx.params.body, "patch");
			if ("ref" in clean) throw badRequest("ref cannot be set by a bulk patch (it is unique)");
			const set = { ...clean, ...stamp("updated", plan.token, new Date().toISOString()) };
			await h.beforePatch?.(ctx, set, null);
			await assertShares(ctx, plan.token, [set.shares]);
			// All or nothing: every document the patch would move out of the grant rows is found before any write.
			if (plan.writeFilter && touches(plan.writeFilter, set))
				for (let last = ""; ;) {
					const batch = await store(ctx).find({ query: last ? { $and: [plan.filter, { id: { $gt: last } }] } : plan.filter, sort: { id: 1 }, limit: BATCH });
					inGrant(
						plan,
						batch.map((b) => ({ ...b, ...set })),
					);
					if (batch.length < BATCH) break;
					last = batch[batch.length - 1].id;
				}
			let total = 0;
			let last = "";
			// Keyset batches over the plan's filter: bounded memory, and each changed document gets its own event.
			for (;;) {
				const query = last ? { $and: [plan.filter, { id: { $gt: last } }] } : plan.filter;
				const batch = await store(ctx).find({ query, sort: { id: 1 }, limit: BATCH });
				if (!batch.length) break;
				for (const b of batch) checkRules(col, { ...b, ...set });
				await store(ctx).setMany(
					batch.map((b) => b.id),
					set,
				);
				await record(
					ctx,
					batch.map((before) => ({ op: "u" as const, before, after: { ...before, ...set } })),
				);
				total += batch.length;
				last = batch[batch.length - 1].id;
				if (batch.length < BATCH) break;
			}
			return { total };
		},
		async remove(ctx) {
			const plan = requirePlan(ctx.locals);
			const { doc: before, res: after } = await removal(ctx, plan, "remove", await target(ctx, plan), (doc) =>
				guarded(ctx, doc, () => store(ctx).setOne(doc.id, stamp("deleted", plan.token, new Date().toISOString()))),
			);
			await record(ctx, [{ op: "d", before, after: null }]);
			return { data: out(after, plan) };
		},
		async restore(ctx) {
			const plan = requirePlan(ctx.locals);
			const before = await store(ctx).findOne({ $and: [plan.filter, { deleted_at: { $ne: null } }] });
			if (!before) throw notFound();
			const after = await guarded(ctx, before, async () => {
				await h.beforeRestore?.(ctx, before);
				return store(ctx).setOne(before.id, { deleted_at: null, deleted_by: null, deleted_in: null, ...stamp("restored", plan.token, new Date().toISOString()) });
			});
			await record(ctx, [{ op: "r", before, after }]);
			return { data: out(after, plan) };
		},
		async destroy(ctx) {
			const plan = requirePlan(ctx.locals);
			const { doc: before } = await removal(ctx, plan, "destroy", await target(ctx, plan), async (doc) => {
				if (!(await ifMatch(ctx, own(ctx), doc, () => store(ctx).removeMany({ id: doc.id })))) throw notFound();
			});
			await record(ctx, [{ op: "d", before, after: null }]);
			return { data: out(before, plan) };
		},
	};
	return handlers;
}

/**
 * The cleaner's retention purge: hard-deletes the documents soft-deleted before `before`, in keyset batches.
 * Each removal is conditional on the `deleted_at` that was read, so a document restored (or deleted again)
 * meanwhile stays. Every removed document gets a `d` change event like a destroy (its `before` carries the
 * `deleted_at`, which tells consumers it was already soft-deleted), and the collection's hooks run.
 */
export async function purge(recorders: Recorders, name: string, ctx: Ctx): Promise<{ purged: number }> {
	const { before, limit } = ctx.params as unknown as PurgeParams;
	if (typeof before !== "string" || Number.isNaN(Date.parse(before))) throw badRequest("before must be an ISO date");
	const max = Number.isInteger(limit) && limit! > 0 ? limit! : Infinity;
	const store = state(ctx.service).stores.get(name)!;
	let purged = 0;
	let last = "";
	while (purged < max) {
		const expired: Record<string, unknown> = { deleted_at: { $ne: null, $lt: before } };
		const query = last ? { ...expired, id: { $gt: last } } : expired;
		const batch = await store.find({ query, sort: { id: 1 }, limit: Math.min(BATCH, max - purged) });
		if (!batch.length) break;
		const removed: Change[] = [];
		for (const doc of batch) if ((await store.removeMany({ id: doc.id, deleted_at: doc.deleted_at })) > 0) removed.push({ op: "d", before: doc, after: null });
		if (removed.length) await recorders.get(name)!(ctx, removed);
		purged += removed.length;
		last = batch[batch.length - 1].id;
		if (batch.length < BATCH) break;
	}
	return { purged };
}

/** Where a cursor stopped: the keyset after its last document, for the page at `offset` of the same read (`mark`). */
interface CursorKeyset {
	mark: string;
	offset: number;
	after: Keyset;
}

/** The read a cursor page belongs to: its action and plan (filter, sort, skip, projection). */
function cursorMark(action: string | undefined, plan: AccessPlan): string {
	const text = JSON.stringify([action, plan.filter, plan.sort, plan.skip, plan.projection], (_k, x) => (x instanceof RegExp ? `/${x.source}/${x.flags}` : x));
	return createHash("sha256").update(text).digest("base64url").slice(0, 22);
}

/** Turns compiled RegExp values of a validated filter back into JSON form, for a nested call that re-validates. */
function jsonQuery(v: unknown): unknown {
	if (v instanceof RegExp) return { $regex: v.source, ...(v.flags ? { $options: v.flags } : {}) };
	if (Array.isArray(v)) return v.map(jsonQuery);
	if (v && typeof v === "object") {
		const o: Record<string, unknown> = {};
		for (const [k, x] of Object.entries(v)) {
			if (x instanceof RegExp && k === "$regex") Object.assign(o, jsonQuery(x));
			else o[k] = jsonQuery(x);
		}
		return o;
	}
	return v;
}
