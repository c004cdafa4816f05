/**
 * Sagas (docs/contracts.md "Sagas"): the four special actions of essential/sagas (start, add, :id/commit, :id/abort),
 * the stage bookkeeping the collection engine calls for staged writes (engine/saga-staging.ts), and the
 * compensation that abort and expiry run.
 *
 * Concurrency: every change of a saga's state and every staged write of it holds the saga's lease in the shared
 * cache (`saga:<id>`, runtime/lock.ts): a staged write from `begin` to `complete`, a commit or a compensation from start
 * to end. State changes are also conditional on the store (`AWAITING` → ...), so two nodes never both commit or
 * both compensate, and a compensation never runs beside a staged write of the same saga.
 */
import type { ServiceSchema } from "moleculer";
import { randomUUID } from "crypto";
import { COLLECTIONS } from "../../catalog";
import { essential, SAGA_STAGE_ACTIONS } from "../../catalog/domains/essential";
import { configOf } from "../../runtime/config";
import { badRequest, conflict, notFound, ApiError } from "../../lib/errors";
import { sharedKeyValue, type KeyValue } from "../../runtime/kv";
import { releaseLease, renewLease, tryLease, type Lease } from "../../runtime/lock";
import { requirePlan } from "../../lib/plan";
import { present } from "../../lib/present";
import { identityOf, type RequestMeta } from "../../lib/types";
import { checkNesting, isPlainObject } from "../../lib/validate";
import { platformDoc, type CollectionHooks, type Ctx, type EngineService } from "../../engine/collection.mixin";
import type { Image, Outcome, SettleReason } from "../../engine/saga-staging";
import type { StoredDoc } from "../../stores";

export const MIN_TTL = 5;
export const MAX_TTL = 900;
/** A staged write or a compensation holds the saga this long at most without renewing. */
const LEASE_TTL_MS = 15_000;
/** How long a staged write, commit or abort waits for the saga held by another one. */
const LEASE_WAIT_MS = 12_000;
const OBJECT_ID = /^[0-9a-f]{24}$/i;

const SAGAS = essential.collections.find((c) => c.name === "sagas")!;
const STAGES = essential.collections.find((c) => c.name === "saga-stages")!;
const BUCKETS = new Set(COLLECTIONS.map((c) => c.path));

type Svc = EngineService;

const leaseKey = (id: string) => `saga:${id}`;
const nowIso = () => new Date().toISOString();

function kvOf(svc: Svc): KeyValue {
	const cfg = configOf(svc.broker);
	return sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
}

async function acquire(svc: Svc, id: string, waitMs = LEASE_WAIT_MS): Promise<Lease | null> {
	const until = Date.now() + waitMs;
	for (;;) {
		const lease = await tryLease(kvOf(svc), leaseKey(id), LEASE_TTL_MS);
		if (lease || Date.now() >= until) return lease;
		await new Promise((r) => setTimeout(r, 5 + Math.floor(Math.random() * 20)));
	}
}

/** Keys a document store refuses (`$...`, dotted): such a value is kept as its JSON text. */
function storable(v: unknown): unknown {
	if (Array.isArray(v)) return v.map(storable);
	if (!isPlainObject(v)) return v;
	if (Object.keys(v).some((k) => k.startsWith("$") || k.includes("."))) return JSON.stringify(v);
	return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, storable(x)]));
}

function byOf(ctx: Ctx) {
	const t = ctx.meta.token!;
	return { owner: identityOf(t), cid: t.cid, aid: t.aid, coworkers: t.coworker ? t.coworker.split(" ").filter(Boolean) : [] };
}

/** The caller's in-flight saga; 404 when the caller cannot see it, 409 when it is not AWAITING or has expired. */
export async function inFlight(svc: Svc, meta: RequestMeta, id: unknown): Promise<StoredDoc> {
	if (typeof id !== "string" || !OBJECT_ID.test(id)) throw notFound(`saga ${String(id)} not found`);
	const saga = await svc.collectionStore("sagas").findOne({ id: id.toLowerCase(), deleted_at: null });
	if (!saga || !meta.token || saga.owner !== identityOf(meta.token)) throw notFound(`saga ${id} not found`);
	if (saga.state !== "AWAITING" || Date.parse(String(saga.expires_at)) <= Date.now()) throw conflict(`saga ${id} is not in flight`);
	return saga;
}

/** A saga's lifetime, whoever sets it (start, a raw create, a financial transaction): 5 to 900 seconds. */
function checkTtl(ttl: unknown): asserts ttl is number {
	if (typeof ttl !== "number" || !Number.isInteger(ttl) || ttl < MIN_TTL || ttl > MAX_TTL) throw badRequest(`ttl must be an integer between ${MIN_TTL} and ${MAX_TTL}`);
}

/** A new saga owned by the caller (also the start of a financial transaction). */
export async function startSaga(svc: Svc, ctx: Ctx, ttl: unknown): Promise<StoredDoc> {
	checkTtl(ttl);
	const t = ctx.meta.token!;
	const doc = platformDoc({ ttl, job: randomUUID(), state: "AWAITING", session: t.session ?? "", expires_at: new Date(Date.now() + ttl * 1000).toISOString() }, byOf(ctx));
	await svc.collectionStore("sagas").insert(doc);
	await svc.recordChanges(ctx, "sagas", [{ op: "c", before: null, after: doc }]);
	return doc;
}

async function changeSaga(svc: Svc, ctx: Ctx, id: string, from: string, set: Record<string, unknown>): Promise<StoredDoc | null> {
	const store = svc.collectionStore("sagas");
	const before = await store.findOne({ id });
	if (!before || before.state !== from) return null;
	const after = await store.updateIf({ id, state: from }, { $set: { ...set, updated_at: nowIso() } });
	if (after) await svc.recordChanges(ctx, "sagas", [{ op: "u", before, after }]);
	return after;
}

async function stagesOf(svc: Svc, saga: string, states: string[]): Promise<StoredDoc[]> {
	return svc.collectionStore("saga-stages").find({ query: { saga, state: { $in: states } }, sort: { seq: -1, id: -1 } });
}

async function settleStage(ctx: Ctx, stage: StoredDoc, images: Image[], reason: SettleReason, conflicted = false): Promise<Outcome[]> {
	const [service, collection] = String(stage.bucket).split("/");
	if (!images.length) return [];
	return ctx.call(`${service}.${collection}.settle`, { images, reason, conflicted }, { meta: { headers: {} } });
}

/**
 * Commit: `COMMITTED` with `committed_at`, then the owning services settle what a commit decides (balance-move tags
 * dropped, transaction states). Repeating it answers the same (and settles again, which changes nothing).
 */
export async function commitSaga(svc: Svc, ctx: Ctx, id: string): Promise<StoredDoc> {
	const lease = await acquire(svc, id);
	if (!lease) throw conflict(`saga ${id} is busy`);
	try {
		let saga = await svc.collectionStore("sagas").findOne({ id });
		if (!saga) throw notFound(`saga ${id} not found`);
		if (saga.state === "AWAITING") {
			if (Date.parse(String(saga.expires_at)) <= Date.now()) throw conflict(`saga ${id} is not in flight`);
			saga = (await changeSaga(svc, ctx, id, "AWAITING", { state: "COMMITTED", committed_at: nowIso() })) ?? (await svc.collectionStore("sagas").findOne({ id }))!;
		}
		if (saga.state !== "COMMITTED") throw conflict(`saga ${id} is not in flight`);
		for (const st of await stagesOf(svc, id, ["pending", "done"])) {
			const images = ((st.images as Image[]) ?? []).filter((i) => i.kind === "inc" || i.kind === "state");
			if (images.length) await settleStage(ctx, st, images, "commit");
		}
		return saga;
	} finally {
		await lease.release().catch(() => undefined);
	}
}

/**
 * Compensation: every stage, newest first, by the service owning its collection (conditional undo: a document
 * changed by someone else since stays, the stage records `conflict`), then `ABORTED` with `aborted_at`. Stages
 * already compensated are skipped, so a second run changes nothing. Returns null when another node holds the saga
 * (`wait: false`, the watcher) or when, for expiry, the saga is not (or no longer) due.
 */
export async function abortSaga(svc: Svc, ctx: Ctx, id: string, reason: "abort" | "expiry", wait = true): Promise<StoredDoc | null> {
	const lease = await acquire(svc, id, wait ? LEASE_WAIT_MS : 0);
	if (!lease) {
		if (wait) throw conflict(`saga ${id} is busy`);
		return null;
	}
	try {
		const saga = await svc.collectionStore("sagas").findOne({ id });
		if (!saga) throw notFound(`saga ${id} not found`);
		if (saga.state === "ABORTED") return saga;
		if (saga.state !== "AWAITING") throw conflict(`saga ${id} is not in flight`);
		if (reason === "expiry" && Date.parse(String(saga.expires_at)) > Date.now()) return null;
		const stages = svc.collectionStore("saga-stages");
		// A conflict of a newer stage is told to the older ones (a transaction whose credit was spent is not cancelled).
		let conflicted = (await stages.count({ saga: id, state: "conflict" })) > 0;
		for (const st of await stagesOf(svc, id, ["pending", "done"])) {
			const outcomes = await settleStage(ctx, st, (st.images as Image[]) ?? [], reason, conflicted);
			const isConflict = outcomes.includes("conflict");
			conflicted ||= isConflict;
			const after = await stages.updateIf(
				{ id: st.id, state: st.state },
				{ $set: { state: isConflict ? "conflict" : "compensated", conflict: isConflict, compensated_at: nowIso(), updated_at: nowIso() } },
			);
			if (after) await svc.recordChanges(ctx, "saga-stages", [{ op: "u", before: st, after }]);
			await lease.renew().catch(() => false);
		}
		return (await changeSaga(svc, ctx, id, "AWAITING", { state: "ABORTED", aborted_at: nowIso(), abort_reason: reason })) ?? (await svc.collectionStore("sagas").findOne({ id }));
	} finally {
		await lease.release().catch(() => undefined);
	}
}

/** The watcher's scan: every saga still AWAITING past `expires_at` is compensated (each once, whoever else scans). */
export async function expireSagas(svc: Svc, ctx: Ctx, limit = 100): Promise<{ compensated: string[] }> {
	const due = await svc.collectionStore("sagas").find({ query: { state: "AWAITING", expires_at: { $lt: nowIso() } }, sort: { expires_at: 1 }, limit });
	const compensated: string[] = [];
	for (const s of due) {
		const done = await abortSaga(svc, ctx, s.id, "expiry", false).catch(() => null);
		if (done?.state === "ABORTED" && done.abort_reason === "expiry") compensated.push(s.id);
	}
	return { compensated };
}

const out = (doc: StoredDoc, ctx: Ctx, col = SAGAS) => present(col, doc, ctx.locals?.plan ? requirePlan(ctx.locals).fields : null);

/**
 * essential/sagas: a raw create starts a saga like `start` does (AWAITING, ttl 5 to 900, `expires_at` from it: the
 * validator already refuses `expires_at` and the other dates the saga operations set); the four special actions.
 */
export const sagaHooks: CollectionHooks = {
	beforeCreate(ctx, doc) {
		if (doc.state !== "AWAITING") throw badRequest("state must be AWAITING on create (a saga's state moves only through start, commit, abort and expiry)");
		checkTtl(doc.ttl);
		doc.expires_at = new Date(Date.now() + doc.ttl * 1000).toISOString();
	},
	/** A saga's lifecycle moves only through start, commit, abort and expiry: never by a patch. */
	beforePatch(ctx, set) {
		const managed = ["state", "ttl", "job", "session"].find((k) => k in set);
		if (managed) throw badRequest(`${managed} is managed by the saga operations (start, commit, abort)`);
	},
	specials: {
		async start(ctx) {
			const body = ctx.params.body;
			if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
			const extra = Object.keys(body).find((k) => k !== "ttl");
			if (extra) throw badRequest(`${extra} is not allowed`);
			if (body.ttl === undefined) throw badRequest("ttl is required");
			return { data: out(await startSaga(ctx.service as unknown as Svc, ctx, body.ttl), ctx) };
		},
		async add(ctx) {
			const svc = ctx.service as unknown as Svc;
			const body = ctx.params.body;
			if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
			const extra = Object.keys(body).find((k) => !["saga", "bucket", "action", "req", "res"].includes(k));
			if (extra) throw badRequest(`${extra} is not allowed`);
			for (const k of ["saga", "bucket", "action", "req"]) if (body[k] === undefined || body[k] === null) throw badRequest(`${k} is required`);
			if (typeof body.bucket !== "string" || !BUCKETS.has(body.bucket)) throw badRequest("bucket must be a collection of the catalog (`service/collection`)");
			if (!(SAGA_STAGE_ACTIONS as readonly unknown[]).includes(body.action)) throw badRequest(`action must be one of ${SAGA_STAGE_ACTIONS.join(", ")}`);
			if (!isPlainObject(body.req)) throw badRequest("req must be an object");
			// Before anything walks them (storable, the size check): no unbounded recursion.
			checkNesting("req", body.req);
			checkNesting("res", body.res);
			if (JSON.stringify(body).length > 256 * 1024) throw badRequest("a stage must not be larger than 256 KB");
			const saga = await inFlight(svc, ctx.meta, body.saga);
			const lease = await acquire(svc, saga.id);
			if (!lease) throw conflict(`saga ${saga.id} is busy`);
			try {
				await inFlight(svc, ctx.meta, saga.id);
				const stages = svc.collectionStore("saga-stages");
				const doc = platformDoc(
					{
						saga: saga.id,
						bucket: body.bucket,
						action: body.action,
						req: storable(body.req),
						res: storable(body.res ?? null),
						state: "external",
						conflict: false,
						images: [],
						seq: await stages.count({ saga: saga.id }),
					},
					byOf(ctx),
				);
				await stages.insert(doc);
				await svc.recordChanges(ctx, "saga-stages", [{ op: "c", before: null, after: doc }]);
				return { data: present(STAGES, doc, requirePlan(ctx.locals).fields) };
			} finally {
				await lease.release().catch(() => undefined);
			}
		},
		async commit(ctx) {
			const svc = ctx.service as unknown as Svc;
			const saga = await svc.collectionStore("sagas").findOne(requirePlan(ctx.locals).filter);
			if (!saga) throw notFound();
			return { data: out(await commitSaga(svc, ctx, saga.id), ctx) };
		},
		async abort(ctx) {
			const svc = ctx.service as unknown as Svc;
			const saga = await svc.collectionStore("sagas").findOne(requirePlan(ctx.locals).filter);
			if (!saga) throw notFound();
			const done = await abortSaga(svc, ctx, saga.id, "abort");
			if (!done) throw new ApiError(409, `saga ${saga.id} is not in flight`);
			return { data: out(done, ctx) };
		},
	},
};

interface BeginParams {
	saga: string;
	bucket: string;
	action: string;
	req: Record<string, unknown>;
	images?: Image[];
	stage?: string;
	lease?: string;
	res?: unknown;
}

/**
 * Internal actions of the essential service (never routed): the engine's stage bookkeeping for staged writes, the
 * watcher's expiry scan, and the saga operations financial transactions run on.
 */
export const sagaActions: ServiceSchema["actions"] = {
	/** Before a staged write's first store write: checks the saga, holds it, records the stage `pending` with its images. */
	"saga-stages.begin": {
		visibility: "public",
		async handler(this: Svc, ctx: Ctx) {
			const p = ctx.params as unknown as BeginParams;
			const saga = await inFlight(this, ctx.meta, p.saga);
			const lease = await acquire(this, saga.id);
			if (!lease) throw conflict(`saga ${saga.id} is busy`);
			try {
				await inFlight(this, ctx.meta, saga.id);
				const stages = this.collectionStore("saga-stages");
				const doc = platformDoc(
					{
						saga: saga.id,
						bucket: p.bucket,
						action: p.action,
						req: storable(p.req),
						res: null,
						state: "pending",
						conflict: false,
						images: p.images ?? [],
						seq: await stages.count({ saga: saga.id }),
					},
					byOf(ctx),
				);
				await stages.insert(doc);
				await this.recordChanges(ctx, "saga-stages", [{ op: "c", before: null, after: doc }]);
				return { stage: doc.id, lease: lease.token };
			} catch (err) {
				await lease.release().catch(() => undefined);
				throw err;
			}
		},
	},
	/** Before each further store write of the same staged request (bulk patch batches). */
	"saga-stages.append": {
		visibility: "public",
		async handler(this: Svc, ctx: Ctx) {
			const p = ctx.params as unknown as BeginParams;
			const stages = this.collectionStore("saga-stages");
			const st = await stages.findOne({ id: p.stage! });
			if (!st || !(await renewLease(kvOf(this), leaseKey(String(st.saga)), p.lease!, LEASE_TTL_MS))) throw conflict(`saga ${st?.saga ?? ""} is not in flight`);
			const after = await stages.updateIf({ id: p.stage!, state: "pending" }, { $push: { images: { $each: p.images ?? [] } } });
			if (!after) throw conflict(`saga ${st.saga} is not in flight`);
			return { ok: true };
		},
	},
	/** After the write, before the answer: `done` with `res`; the saga is free again. */
	"saga-stages.complete": {
		visibility: "public",
		async handler(this: Svc, ctx: Ctx) {
			const p = ctx.params as unknown as BeginParams;
			const stages = this.collectionStore("saga-stages");
			const st = await stages.findOne({ id: p.stage! });
			try {
				if (!st) return { ok: false };
				const after = await stages.updateIf({ id: p.stage!, state: "pending" }, { $set: { state: "done", res: storable(p.res ?? null), updated_at: nowIso() } });
				if (after) await this.recordChanges(ctx, "saga-stages", [{ op: "u", before: st, after }]);
				return { ok: !!after };
			} finally {
				if (st && p.lease) await releaseLease(kvOf(this), leaseKey(String(st.saga)), p.lease).catch(() => undefined);
			}
		},
	},
	/** A read with the header, or a write that changed nothing: a stage with nothing to undo. */
	"saga-stages.record": {
		visibility: "public",
		async handler(this: Svc, ctx: Ctx) {
			const p = ctx.params as unknown as BeginParams;
			const saga = await inFlight(this, ctx.meta, p.saga);
			const stages = this.collectionStore("saga-stages");
			const doc = platformDoc(
				{
					saga: saga.id,
					bucket: p.bucket,
					action: p.action,
					req: storable(p.req),
					res: storable(p.res ?? null),
					state: "done",
					conflict: false,
					images: [],
					seq: await stages.count({ saga: saga.id }),
				},
				byOf(ctx),
			);
			await stages.insert(doc);
			await this.recordChanges(ctx, "saga-stages", [{ op: "c", before: null, after: doc }]);
			return { stage: doc.id };
		},
	},
	/** The watcher's periodic scan (and the one at start). */
	"sagas.expire": {
		visibility: "public",
		handler(this: Svc, ctx: Ctx) {
			return expireSagas(this, ctx, Number((ctx.params as { limit?: unknown } | undefined)?.limit) || 100);
		},
	},
	/** For financial: start a saga for the caller. */
	"sagas.open": {
		visibility: "public",
		async handler(this: Svc, ctx: Ctx) {
			return startSaga(this, ctx, (ctx.params as { ttl?: unknown }).ttl);
		},
	},
	/** For financial: commit or abort a saga by id (its own authority check done by the caller). */
	"sagas.finish": {
		visibility: "public",
		async handler(this: Svc, ctx: Ctx) {
			const { id, outcome } = ctx.params as unknown as { id: string; outcome: "commit" | "abort" };
			if (outcome === "commit") return commitSaga(this, ctx, id);
			const done = await abortSaga(this, ctx, id, "abort");
			if (!done) throw conflict(`saga ${id} is not in flight`);
			return done;
		},
	},
	/** For financial's raw transaction create: the saga exists and is the caller's. */
	"sagas.visible": {
		visibility: "public",
		async handler(this: Svc, ctx: Ctx) {
			const id = (ctx.params as { id?: unknown }).id;
			if (typeof id !== "string" || !OBJECT_ID.test(id) || !ctx.meta.token) return false;
			const saga = await this.collectionStore("sagas").findOne({ id: id.toLowerCase(), deleted_at: null });
			return !!saga && saga.owner === identityOf(ctx.meta.token);
		},
	},
};
