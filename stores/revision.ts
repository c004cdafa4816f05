/**
 * Document revisions, entity tags and `If-Match` (docs/contracts.md "Retries and concurrent writers").
 *
 * Every write of a collection's document stores a new random revision in its internal `_rev` (never returned, never
 * queried, never in change events): `revisioned` wraps a collection's store so that every write path sets it, the
 * engine's, the hooks' and internal actions' (`collectionStore`), the platform's balance moves and saga settlement
 * alike. A document's tag is a digest of its id and revision only, never of its fields: it tells that the document
 * changed (as the contract requires, a change of a field the caller cannot read included) and nothing of any value.
 * A revision is random, not a counter: the tag does not tell how many writes there were either, and a document
 * never gets an earlier tag back.
 *
 * `If-Match` is atomic with the write it guards: the write's condition names the revision that was compared (a
 * compare-and-set on every store), so a writer that came in between makes the write change nothing and answer 412.
 */
import { AsyncLocalStorage } from "async_hooks";
import { createHash, randomBytes } from "crypto";
import { ApiError, badRequest } from "../lib/errors";
import type { DocumentStore, Filter, StoredDoc } from "./types";
import { updateOf } from "./types";

import { REV } from "../catalog/store";

export { REV };

export const PRECONDITION_FAILED = "precondition failed";
export const preconditionFailed = () => new ApiError(412, PRECONDITION_FAILED);

const newRev = () => randomBytes(9).toString("base64url");

/** A `$set` with a new revision (one a caller already put there, a staged write's, is kept). */
export function withRev(set: Record<string, unknown>): Record<string, unknown> {
	return REV in set ? set : { ...set, [REV]: newRev() };
}

/** A store update that also stores a new revision (whatever revision the update itself would put back). */
function bumped(update: Record<string, unknown>): Record<string, unknown> {
	const unset = update.$unset as Record<string, unknown> | undefined;
	const out: Record<string, unknown> = { ...update, $set: { ...(update.$set as Record<string, unknown> | undefined), [REV]: newRev() } };
	if (unset && REV in unset) {
		const rest = { ...unset };
		delete rest[REV];
		if (Object.keys(rest).length) out.$unset = rest;
		else delete out.$unset;
	}
	return out;
}

/** The strong entity tag of a stored document (quoted): its id and revision, digested. */
export function tagOf(doc: StoredDoc): string {
	const rev = doc[REV];
	return `"${createHash("sha256")
		.update(`${doc.id}\n${rev === undefined ? "" : String(rev)}`)
		.digest("base64url")
		.slice(0, 27)}"`;
}

/**
 * The weak tag of a representation that also depends on other documents (a read with `populate`): the document's tag
 * and a digest of what the read returned of the others (caller-visible values only). Good for `If-None-Match`, never
 * for `If-Match` (strong comparison, RFC 9110 section 8.8.3.2).
 */
export function weakTagOf(doc: StoredDoc, others: unknown): string {
	const digest = createHash("sha256")
		.update(`${tagOf(doc)}\n${JSON.stringify(others ?? null)}`)
		.digest("base64url")
		.slice(0, 27);
	return `W/"${digest}"`;
}

/** At most this many characters of `If-Match` are read (a longer header answers 400). */
export const MAX_IF_MATCH = 2048;
const TAG_LIST = /^\s*(?:W\/)?"[\x21\x23-\x7e\x80-\xff]*"\s*(?:,\s*(?:W\/)?"[\x21\x23-\x7e\x80-\xff]*"\s*)*$/;
const TAG = /(W\/)?"([\x21\x23-\x7e\x80-\xff]*)"/g;

/**
 * The condition of an `If-Match` header value (RFC 9110 section 13.1.1): `*` (any current document), or a list of entity tags
 * compared strongly (a weak tag never matches). Undefined when the header is absent; 400 when it is neither form.
 */
export type IfMatch = { any: true } | { any: false; tags: string[] };
export function parseIfMatch(value: unknown): IfMatch | undefined {
	if (value === undefined) return undefined;
	const v = String(value);
	if (v.length > MAX_IF_MATCH) throw badRequest(`If-Match accepts at most ${MAX_IF_MATCH} characters`);
	if (v.trim() === "*") return { any: true };
	if (!TAG_LIST.test(v)) throw badRequest('If-Match must be "*" or a list of entity tags, e.g. If-Match: "<ETag of a GET>"');
	const tags: string[] = [];
	for (const m of v.matchAll(TAG)) if (!m[1]) tags.push(`"${m[2]}"`);
	return { any: false, tags };
}

/**
 * Whether an `If-None-Match` header value names `tag` (RFC 9110 section 13.1.2: `*`, or a list compared weakly, `W/`
 * ignored on both sides). Absent: no; 400 when it is neither form.
 */
export function noneMatchHits(value: unknown, tag: string): boolean {
	if (value === undefined) return false;
	const v = String(value);
	if (v.length > MAX_IF_MATCH) throw badRequest(`If-None-Match accepts at most ${MAX_IF_MATCH} characters`);
	if (v.trim() === "*") return true;
	if (!TAG_LIST.test(v)) throw badRequest('If-None-Match must be "*" or a list of entity tags, e.g. If-None-Match: "<ETag of a GET>"');
	const opaque = tag.replace(/^W\//, "");
	for (const m of v.matchAll(TAG)) if (`"${m[2]}"` === opaque) return true;
	return false;
}

/** Whether a present document satisfies the condition (no condition: yes). */
export function matches(cond: IfMatch | undefined, doc: StoredDoc): boolean {
	return !cond || cond.any || cond.tags.includes(tagOf(doc));
}

/**
 * A write the caller pinned with `If-Match` (a by-id route: the standard ones and the special actions): the first
 * write of the action to the document (in this process, through the collection's revisioned store) is conditional on
 * the compared revision, 412 when it no longer holds. Saga settlement the action sets off runs unpinned (`unpinned`).
 */
interface Pin {
	store: DocumentStore;
	id: string;
	rev: unknown;
	used: boolean;
}
const pins = new AsyncLocalStorage<Pin | undefined>();

export function pinned<T>(store: DocumentStore, doc: StoredDoc, fn: () => Promise<T>): Promise<T> {
	return pins.run({ store, id: doc.id, rev: doc[REV], used: false }, fn);
}

export function unpinned<T>(fn: () => Promise<T>): Promise<T> {
	return pins.run(undefined, fn);
}

/** The id a store query or write names, when it names exactly one (`id` equal to a string). */
function idOf(query: Filter): string | undefined {
	const v = query.id;
	return typeof v === "string" ? v : undefined;
}

/** The pin of `store`'s document `id` in this async context, when its first write has not happened yet. */
function pinOf(store: DocumentStore, id: string | undefined): Pin | undefined {
	const p = pins.getStore();
	if (!p || p.used || p.store !== store || id === undefined || p.id !== id) return undefined;
	p.used = true;
	return p;
}

/**
 * The store of one collection with revisions: every `setOne`, `setMany`, `updateIf` and `replaceIf` stores a new
 * revision; a pinned document's first write (those and `removeMany`) is conditional on the pinned revision. Everything
 * else is the store's own (a proxy: optional methods stay absent when the store has none). Its views under a deadline
 * (`within`) are revisioned too, and honour the pins made on it (`pinsOf`: the store the pins name).
 */
export function revisioned(base: DocumentStore, pinsOf?: DocumentStore): DocumentStore {
	/** The pinned write changed nothing: 412 when the document is still there at another revision, else as the store. */
	async function missed<T>(pin: Pin, none: T): Promise<T> {
		const now = await base.findOne({ id: pin.id });
		if (now && now[REV] !== pin.rev) throw preconditionFailed();
		return none;
	}
	const at = (pin: Pin, query: Filter): Filter => ({ $and: [query, { [REV]: pin.rev === undefined ? { $exists: false } : pin.rev }] });
	const own: Partial<DocumentStore> = {
		async setOne(id, set) {
			const pin = pinOf(pinKey, id);
			if (!pin) return base.setOne(id, withRev(set));
			return (await base.updateIf(at(pin, { id }), updateOf(withRev(set)))) ?? missed(pin, null);
		},
		setMany: (ids, set) => base.setMany(ids, withRev(set)),
		async updateIf(query, update) {
			const pin = pinOf(pinKey, idOf(query));
			if (!pin) return base.updateIf(query, bumped(update));
			return (await base.updateIf(at(pin, query), bumped(update))) ?? missed(pin, null);
		},
		async replaceIf(query, doc) {
			const pin = pinOf(pinKey, doc.id);
			const next = { ...doc, [REV]: newRev() };
			if (!pin) return base.replaceIf(query, next);
			return (await base.replaceIf(at(pin, query), next)) || missed(pin, false);
		},
		async removeMany(query) {
			const pin = pinOf(pinKey, idOf(query));
			if (!pin) return base.removeMany(query);
			return (await base.removeMany(at(pin, query))) || missed(pin, 0);
		},
		within:
			base.within &&
			((ms: number) => {
				let v = views.get(ms);
				if (!v) views.set(ms, (v = revisioned(base.within!(ms), pinKey)));
				return v;
			}),
	};
	const views = new Map<number, DocumentStore>();
	// Bound once per method, again when the store's method is replaced (a test's spy assigned through the proxy).
	const bound = new Map<PropertyKey, { of: unknown; f: unknown }>();
	const proxy: DocumentStore = new Proxy(base, {
		get(target, key) {
			if (key in own) return own[key as keyof DocumentStore];
			const v = Reflect.get(target, key, target);
			if (typeof v !== "function") return v;
			const b = bound.get(key);
			if (b && b.of === v) return b.f;
			const f = v.bind(target);
			bound.set(key, { of: v, f });
			return f;
		},
	});
	const pinKey = pinsOf ?? proxy;
	return proxy;
}
