/**
 * Staged writes (x-saga-session): the one seam of the collection engine for sagas.
 *
 * - `stagedAction` wraps every standard action. Without the header it is the action itself. With it, a read is
 *   answered and then recorded as a stage (`FIND`, `FIND_ONE`, `COUNT_DOCUMENTS`); a write runs with a staging
 *   store (below) and its stage is completed with `res` before the answer leaves.
 * - `stagingStore` is the engine's store for a staged write: before each store write it records, write-ahead, what
 *   compensation needs (inserted ids with their stamps, before-images, destroyed documents) in the stage
 *   (essential.saga-stages.begin/append, on whatever node runs essential). The stage exists, `pending`, before the
 *   write reaches the store, so no write of a saga, acknowledged or not, exists without its stage. The saga check
 *   (the caller's saga, AWAITING, unexpired) happens there, before the first write.
 * - `settle` is the compensation (and commit settlement) of the owning service: `{collection}.settle`.
 */
import type { CollectionDef, DomainDef, StandardOp } from "../catalog";
import type { SAGA_STAGE_ACTIONS } from "../catalog/domains/essential";
import { writeOnlyFields } from "../lib/present";
import type { ChangeOp } from "../lib/change-event";
import { sha256Hex } from "../lib/crypto";
import { isPlainObject } from "../lib/validate";
import type { RequestMeta } from "../lib/types";
import type { DocumentStore, StoredDoc } from "../stores";
import { isDuplicateKeyError, pageOf, updateOf } from "../stores";
import { REV, withRev } from "../stores/revision";

export const SAGA_HEADER = "x-saga-session";

type StageAction = (typeof SAGA_STAGE_ACTIONS)[number];

export const STAGE_ACTION: Record<StandardOp, StageAction> = {
	create: "INSERT_MANY",
	bulkCreate: "INSERT_MANY",
	patch: "FIND_ONE_AND_UPDATE",
	remove: "FIND_ONE_AND_UPDATE",
	restore: "FIND_ONE_AND_UPDATE",
	bulkPatch: "UPDATE_MANY",
	destroy: "FIND_ONE_AND_DELETE",
	list: "FIND",
	cursor: "FIND",
	get: "FIND_ONE",
	count: "COUNT_DOCUMENTS",
};
const READS = new Set<StandardOp>(["list", "cursor", "get", "count"]);

/** What tells a later writer apart: a write by anyone changes at least one of these. */
export interface Stamp {
	updated_at: unknown;
	deleted_at: unknown;
	restored_at: unknown;
}

/**
 * What compensation (and commit settlement) needs for one document. An insert keeps the digest of the document it
 * inserted, an update the `$set` it applied: compensation undoes a document only while it is exactly as the stage
 * left it (a write by anyone since, a platform balance move included, is a conflict), and an update's undo puts
 * back only the fields of that `$set`.
 */
export type Image =
	| { kind: "insert"; id: string; after: Stamp; digest?: string }
	| { kind: "update"; id: string; before: StoredDoc; after: Stamp; set?: Record<string, unknown> }
	| { kind: "destroy"; id: string; before: StoredDoc }
	/** A balance move: `$inc` of `by` on `field`, tagged `op` in the document's `saga_ops` (undone at most once). */
	| { kind: "inc"; id: string; field: string; by: number; op: string }
	/** A state the saga's end decides: `from` must still hold; `commit`, `abort` or `expiry` is `$set`. */
	| {
			kind: "state";
			id: string;
			from: Record<string, unknown>;
			commit?: Record<string, unknown>;
			abort?: Record<string, unknown>;
			expiry?: Record<string, unknown>;
			/** Instead of abort/expiry when a newer stage of the saga could not be undone (a credit already spent). */
			conflict?: Record<string, unknown>;
	  };

export type Outcome = "undone" | "already" | "conflict" | "settled";
export type SettleReason = "abort" | "expiry" | "commit";

export function stampOf(doc: Record<string, unknown>): Stamp {
	return { updated_at: doc.updated_at ?? null, deleted_at: doc.deleted_at ?? null, restored_at: doc.restored_at ?? null };
}

const sameStamp = (a: Stamp, b: Stamp) => a.updated_at === b.updated_at && a.deleted_at === b.deleted_at && a.restored_at === b.restored_at;

/**
 * A document's JSON with its keys sorted at every depth, without its revision: equal for equal documents whichever
 * store returns them. The revision is left out because undoing a later stage of the same saga gives the document a
 * revision of its own (never an earlier tag again) while putting back exactly what the earlier stage left; a write by
 * anyone else changes a field too (every write stamps `updated_at`, a balance move its balance).
 */
const canonical = (doc: Record<string, unknown>) => {
	const { [REV]: _rev, ...content } = doc;
	return JSON.stringify(content, (_k, v) =>
		isPlainObject(v)
			? Object.fromEntries(
					Object.keys(v)
						.sort()
						.map((k) => [k, v[k]]),
				)
			: v,
	);
};
const digestOf = (doc: Record<string, unknown>) => sha256Hex(canonical(doc));

/**
 * A stage's images may have been recorded by a version whose documents held their id as `_id` (a saga in flight
 * across an upgrade): `currentForm` reads such a before-image as the store holds documents now (`id`), `earlierForm`
 * gives a document as that version held it, so an insert's digest of either form is recognised.
 */
function currentForm(doc: StoredDoc): StoredDoc {
	if (!Object.prototype.hasOwnProperty.call(doc, "_id")) return doc;
	const { _id: id, ...rest } = doc as Record<string, unknown>;
	return { ...rest, id: String(id) };
}
const earlierForm = ({ id, ...rest }: StoredDoc): Record<string, unknown> => ({ ...rest, _id: id });
const sameDigest = (cur: StoredDoc, digest: string) => digestOf(cur) === digest || digestOf(earlierForm(cur)) === digest;

type StoreUpdate = { $set?: Record<string, unknown>; $unset?: Record<string, unknown> };

/** The document as the store leaves it after `$set` (store semantics: a cleared `ref` is removed). */
function applySet(before: StoredDoc, set: Record<string, unknown>): StoredDoc {
	const u = updateOf(set) as StoreUpdate;
	const d = { ...before, ...u.$set };
	for (const k of Object.keys(u.$unset ?? {})) delete d[k];
	return d;
}

/** The update that puts back the before-image's values of the fields `set` wrote, and nothing else. */
function revertOf(before: StoredDoc, set: Record<string, unknown>): StoreUpdate {
	const keys = Object.keys(set).filter((k) => k !== "id");
	const $set = Object.fromEntries(keys.filter((k) => before[k] !== undefined).map((k) => [k, before[k]]));
	const $unset = Object.fromEntries(keys.filter((k) => before[k] === undefined).map((k) => [k, true]));
	return { ...(Object.keys($set).length ? { $set } : {}), ...(Object.keys($unset).length ? { $unset } : {}) };
}

/**
 * The compare-and-set condition "still exactly `cur`" as far as a store query can say it: its stamps and every
 * top-level scalar (a balance among them), so a write landing between the read and the undo makes the undo a no-op.
 */
function unchanged(cur: StoredDoc): Record<string, unknown> {
	const scalars = Object.entries(cur).filter(([k, v]) => k !== "id" && (v === null || ["string", "number", "boolean"].includes(typeof v)));
	return { ...Object.fromEntries(scalars), id: cur.id, deleted_at: cur.deleted_at ?? null };
}

interface StageState {
	saga: string;
	bucket: string;
	action: StageAction;
	req: Record<string, unknown>;
	id?: string;
	lease?: string;
}

/** The request's params as a collection action gets them: its body, query and path's id. */
interface StagedParams {
	body?: unknown;
	query?: unknown;
	params?: { id?: unknown };
}

/** What staging reads and sets of a collection action's Context. */
type CallCtx = { call(action: string, params?: unknown): Promise<unknown>; locals: Record<string, unknown>; meta: RequestMeta; params: StagedParams };

async function writeAhead(ctx: CallCtx, stage: StageState, images: Image[]): Promise<void> {
	if (!stage.id) {
		const r = (await ctx.call("essential.saga-stages.begin", { saga: stage.saga, bucket: stage.bucket, action: stage.action, req: stage.req, images })) as {
			stage: string;
			lease: string;
		};
		stage.id = r.stage;
		stage.lease = r.lease;
	} else if (images.length) await ctx.call("essential.saga-stages.append", { stage: stage.id, lease: stage.lease, images });
}

const insertImage = (doc: StoredDoc): Image => ({ kind: "insert", id: doc.id, after: stampOf(doc), digest: digestOf(doc) });
const updateImage = (before: StoredDoc, set: Record<string, unknown>): Image => ({ kind: "update", id: before.id, before, after: stampOf(applySet(before, set)), set });

/** The store a staged write uses: each write is preceded by its images in the stage. Reads pass through. */
export function stagingStore(ctx: CallCtx, base: DocumentStore): DocumentStore {
	const stage = ctx.locals?.stage as StageState | undefined;
	if (!stage) return base;
	const note = (images: Image[]) => writeAhead(ctx, stage, images);
	return {
		kind: base.kind,
		connect: () => base.connect(),
		disconnect: () => base.disconnect(),
		find: (o) => base.find(o),
		findOne: (q) => base.findOne(q),
		count: (q, o) => base.count(q, o),
		findPage: (o) => pageOf(base, o),
		ping: () => base.ping(),
		updateIf: (q, u) => base.updateIf(q, u),
		replaceIf: (q, d) => base.replaceIf(q, d),
		async insert(doc) {
			await note([insertImage(doc)]);
			return base.insert(doc);
		},
		async insertMany(docs) {
			await note(docs.map(insertImage));
			return base.insertMany(docs);
		},
		// The new revision is chosen here, so the image's `$set` holds it; compensation compares the document's content
		// (not its revision: see `canonical`) with what the stage left, and gives it a revision of its own.
		async setOne(id, set) {
			const before = await base.findOne({ id });
			const revised = withRev(set);
			if (before) await note([updateImage(before, revised)]);
			return base.setOne(id, revised);
		},
		async setMany(ids, set) {
			const befores = await base.find({ query: { id: { $in: ids } } });
			const revised = withRev(set);
			await note(befores.map((b) => updateImage(b, revised)));
			return base.setMany(ids, revised);
		},
		async removeMany(q) {
			const befores = await base.find({ query: q });
			await note(befores.map((b) => ({ kind: "destroy" as const, id: b.id, before: b })));
			return base.removeMany(q);
		},
	};
}

/** The request as the stage keeps it: query, body and id, without write-only values (passwords, secrets). */
function reqOf(col: CollectionDef, params: StagedParams | undefined): Record<string, unknown> {
	const hidden = writeOnlyFields(col);
	const strip = (b: unknown) => (isPlainObject(b) ? Object.fromEntries(Object.entries(b).filter(([k]) => !hidden.includes(k))) : b);
	const body = params?.body;
	const clean = isPlainObject(body) && Array.isArray(body.items) ? { ...body, items: body.items.map(strip) } : strip(body);
	return { query: params?.query ?? {}, ...(clean !== undefined ? { body: clean } : {}), ...(params?.params?.id ? { id: params.params.id } : {}) };
}

/** The answer as the stage keeps it: write-only values revealed once (a generated secret) never stored. */
function resOf(col: CollectionDef, op: StandardOp, res: unknown): unknown {
	const hidden = writeOnlyFields(col);
	const strip = (d: unknown) => (isPlainObject(d) ? Object.fromEntries(Object.entries(d).filter(([k]) => !hidden.includes(k))) : d);
	if (!isPlainObject(res)) return res ?? null;
	// A read keeps what it saw (ids and total), not the documents.
	if (READS.has(op)) {
		if (Array.isArray(res.items)) return { ids: res.items.map((d: { id?: unknown } | null | undefined) => d?.id), ...(res.total !== undefined ? { total: res.total } : {}) };
		if (isPlainObject(res.data)) return { id: res.data.id };
		return res;
	}
	if (Array.isArray(res.items)) return { ...res, items: res.items.map(strip) };
	if (isPlainObject(res.data)) return { ...res, data: strip(res.data) };
	return res;
}

export function stagedAction<C extends CallCtx>(domain: DomainDef, col: CollectionDef, op: StandardOp, handler: (ctx: C) => Promise<unknown>) {
	const bucket = `${domain.name}/${col.name}`;
	const action = STAGE_ACTION[op];
	return async function staged(ctx: C): Promise<unknown> {
		const saga = ctx.meta.headers?.[SAGA_HEADER] as string | undefined;
		if (saga === undefined) return handler(ctx);
		ctx.meta.$responseHeaders = { ...(ctx.meta.$responseHeaders as Record<string, string> | undefined), [SAGA_HEADER]: saga };
		const req = reqOf(col, ctx.params);
		if (READS.has(op)) {
			const res = await handler(ctx);
			await ctx.call("essential.saga-stages.record", { saga, bucket, action, req, res: resOf(col, op, res) });
			return res;
		}
		const stage: StageState = { saga, bucket, action, req };
		ctx.locals.stage = stage;
		let res: unknown;
		try {
			res = await handler(ctx);
		} catch (err) {
			// The stage stays (pending, with its images): compensation inspects the documents themselves.
			if (stage.id) await ctx.call("essential.saga-stages.complete", { stage: stage.id, lease: stage.lease, res: null }).catch(() => undefined);
			throw err;
		} finally {
			ctx.locals.stage = undefined;
		}
		// A write that changed nothing (a bulk patch matching no document) is still a stage of the saga.
		if (stage.id) await ctx.call("essential.saga-stages.complete", { stage: stage.id, lease: stage.lease, res: resOf(col, op, res) });
		else await ctx.call("essential.saga-stages.record", { saga, bucket, action, req, res: resOf(col, op, res) });
		return res;
	};
}

export interface SettleDeps {
	store: DocumentStore;
	/** Records change events (webhooks, MQTT, stats) for the owning collection. */
	record(changes: Array<{ op: ChangeOp; before: StoredDoc | null; after: StoredDoc | null }>): Promise<void>;
}

const now = () => new Date().toISOString();

/**
 * Compensation of one stage's images, newest first, by the service owning the collection; every step is
 * conditional on the document as the stage left it, so a second run (a retry, another node) changes nothing, and a
 * document someone else changed since is left alone (`conflict`). With `commit`, only settles (balance-move tags
 * dropped, decided states set).
 */
export async function settle(d: SettleDeps, images: Image[], reason: SettleReason, conflicted = false): Promise<Outcome[]> {
	const incs = images.filter((i): i is Extract<Image, { kind: "inc" }> => i.kind === "inc");
	if (reason !== "commit" && incs.length) return settleMoves(d, images, incs);
	const out: Outcome[] = [];
	for (const img of [...images].reverse()) out.unshift(await settleOne(d, img, reason, conflicted));
	return out;
}

/**
 * Balance moves are undone all or nothing: credits first (a credit the payee already spent cannot be taken back,
 * and then the credits already taken back are given again and the debits stay: the whole stage is a conflict), then
 * debits (giving money back always fits). A move on a document that no longer exists (destroyed since) is neither
 * undone nor counted as undone: the whole stage is a conflict before anything moves, so the ledger never moves past
 * a destroyed wallet, and the undo of that destroy brings back the very balance the ledger holds for it. So
 * compensation never creates or destroys money.
 */
async function settleMoves(d: SettleDeps, images: Image[], incs: Array<Extract<Image, { kind: "inc" }>>): Promise<Outcome[]> {
	const stands = () => images.map((i) => (i.kind === "inc" ? "conflict" : "already"));
	for (const id of new Set(incs.map((i) => i.id))) if (!(await d.store.findOne({ id }))) return stands();
	const credits = incs.filter((i) => i.by > 0);
	const debits = incs.filter((i) => i.by <= 0);
	const outcome = new Map<Image, Outcome>();
	const reversed: typeof credits = [];
	for (const c of credits) {
		const o = await settleOne(d, c, "abort");
		outcome.set(c, o);
		if (o === "undone") reversed.push(c);
		if (o === "conflict") {
			for (const r of reversed.reverse()) {
				const after = await d.store.updateIf({ id: r.id }, { $inc: { [r.field]: r.by }, $push: { saga_ops: r.op } });
				if (after) await d.record([{ op: "u", before: { ...after, [r.field]: (after[r.field] as number) - r.by }, after }]);
			}
			return stands();
		}
	}
	for (const x of debits) outcome.set(x, await settleOne(d, x, "abort"));
	return images.map((i) => outcome.get(i) ?? "already");
}

async function settleOne(d: SettleDeps, img: Image, reason: SettleReason, conflicted = false): Promise<Outcome> {
	const { store } = d;
	if (reason === "commit") {
		if (img.kind === "inc") {
			await store.updateIf({ id: img.id, saga_ops: img.op }, { $pull: { saga_ops: img.op } });
			return "settled";
		}
		if (img.kind === "state" && img.commit) return applyState(d, img, img.commit);
		return "settled";
	}
	switch (img.kind) {
		case "insert": {
			const cur = await store.findOne({ id: img.id });
			if (!cur) return "already";
			// Changed since, by anyone (a balance credited by the platform too): left as it is. (An image recorded by an
			// earlier version has no digest: its stamps alone decide.)
			if (!sameStamp(stampOf(cur), img.after) || (img.digest !== undefined && !sameDigest(cur, img.digest))) return "conflict";
			const n = await store.removeMany(unchanged(cur));
			if (!n) return "conflict";
			await d.record([{ op: "d", before: cur, after: null }]);
			return "undone";
		}
		case "update": {
			const cur = await store.findOne({ id: img.id });
			if (!cur) return "conflict";
			const before = currentForm(img.before);
			if (sameStamp(stampOf(cur), stampOf(before))) return "already";
			// Anything but exactly what the stage left (a later write by anyone, a balance move by the platform) is a
			// conflict. An image recorded by an earlier version has no `$set` to tell that by: it is left alone too.
			if (!img.set || canonical(cur) !== canonical(applySet(before, img.set))) return "conflict";
			// Only the fields the stage wrote go back: a balance, or anything else the platform keeps, is never written.
			const after = await store.updateIf(unchanged(cur), revertOf(before, img.set));
			if (!after) return "conflict";
			// Undoing a delete restores, undoing a restore deletes, anything else is an update.
			const op: ChangeOp = cur.deleted_at && !after.deleted_at ? "r" : !cur.deleted_at && after.deleted_at ? "d" : "u";
			await d.record([{ op, before: cur, after: op === "d" ? null : after }]);
			return "undone";
		}
		case "destroy": {
			const cur = await store.findOne({ id: img.id });
			const before = currentForm(img.before);
			if (cur) return sameStamp(stampOf(cur), stampOf(before)) ? "already" : "conflict";
			try {
				await store.insert(before);
			} catch (err) {
				if (isDuplicateKeyError(err)) return "conflict";
				throw err;
			}
			await d.record([{ op: "c", before: null, after: before }]);
			return "undone";
		}
		case "inc": {
			// Undone once: the tag goes with the reverse move. A credit already spent cannot be taken back, nor a move on a
			// document that is gone (conflict); without its tag, the move is undone already.
			const cond: Record<string, unknown> = { id: img.id, saga_ops: img.op };
			if (img.by > 0) cond[img.field] = { $gte: img.by };
			const after = await store.updateIf(cond, { $inc: { [img.field]: -img.by }, $pull: { saga_ops: img.op } });
			if (!after) {
				const cur = await store.findOne({ id: img.id });
				return !cur || ((cur.saga_ops as string[] | undefined) ?? []).includes(img.op) ? "conflict" : "already";
			}
			await d.record([{ op: "u", before: { ...after, [img.field]: (after[img.field] as number) + img.by }, after }]);
			return "undone";
		}
		case "state": {
			const set = conflicted && img.conflict ? img.conflict : reason === "expiry" ? img.expiry : img.abort;
			return set ? applyState(d, img, set) : "already";
		}
	}
}

async function applyState(d: SettleDeps, img: Extract<Image, { kind: "state" }>, set: Record<string, unknown>): Promise<Outcome> {
	const stamped = Object.fromEntries(Object.entries(set).map(([k, v]) => [k, v === "$now" ? now() : v]));
	const before = await d.store.findOne({ id: img.id, ...img.from });
	if (!before) return "already";
	const after = await d.store.updateIf({ id: img.id, ...img.from }, { $set: { ...stamped, updated_at: now() } });
	if (!after) return "already";
	await d.record([{ op: "u", before, after }]);
	return "settled";
}
