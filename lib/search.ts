/**
 * Relevance-ranked text search (CONTRACTS.md "Other special actions", docs/search.md): one in-memory MiniSearch index
 * per searchable collection and node. The index only ranks: it never decides what a caller sees. The search action
 * reads the ranked ids back from the document store through the caller's view (plan.filter), so zones, grant rows,
 * soft delete and tenants are applied by the store, and matching runs only over the text fields the caller's grant
 * lets it read (each field is indexed on its own).
 */
import MiniSearch from "minisearch";
import { SETTABLE_FIELDS, type CollectionDef } from "../catalog";
import { badRequest } from "./errors";
import { fieldsAllowed } from "./grants";
import type { Doc } from "./types";

/** Longest `q` accepted (characters). */
export const MAX_QUERY_LENGTH = 200;
/** Terms of a query taken into account (the rest are ignored): bounds the work one request can cause. */
export const MAX_QUERY_TERMS = 16;

/** Common fields that hold searchable text on every collection. */
const COMMON_TEXT = ["description", "tags"] as const;

/**
 * The fields a collection's search matches: its own free-text strings (no enum, no format such as ids or emails),
 * plus `description` and `tags`. Write-only and internal fields never: they are never indexed at all.
 */
export function textFields(col: CollectionDef): string[] {
	const own = Object.entries(col.fields)
		.filter(([, f]) => f.type === "string" && !f.enum && !f.format && !f.writeOnly && !f.internal && !f.relation)
		.map(([k]) => k);
	return [...own, ...COMMON_TEXT.filter((k) => SETTABLE_FIELDS[k] && !own.includes(k))];
}

/** The indexed fields the caller may match: those its grant's field allowlist covers (null = all). */
export function searchableFor(fields: string[], allowed: string[] | null): string[] {
	if (!allowed) return fields;
	return fields.filter((f) => fieldsAllowed([f], allowed).length === 0);
}

/** `q` (or another parameter): required, a non-empty string of at most MAX_QUERY_LENGTH characters. */
export function parseQueryText(raw: unknown, name = "q"): string {
	if (raw === undefined || raw === null || raw === "") throw badRequest(`${name} is required`);
	if (typeof raw !== "string") throw badRequest(`${name} must be a string`);
	if (raw.length > MAX_QUERY_LENGTH) throw badRequest(`${name} must be at most ${MAX_QUERY_LENGTH} characters`);
	if (!raw.trim()) throw badRequest(`${name} is required`);
	return raw;
}

function textOf(v: unknown): string | undefined {
	if (typeof v === "string") return v;
	if (Array.isArray(v)) return v.filter((x) => typeof x === "string").join(" ");
	return undefined;
}

const TOKEN = /[\p{L}\p{N}_]+/gu;
export function tokenize(text: string): string[] {
	return text.match(TOKEN) ?? [];
}

export interface Hit {
	id: string;
	score: number;
}

/** The index of one collection on this node. */
export class CollectionIndex {
	readonly fields: string[];
	private mini: MiniSearch;

	constructor(col: CollectionDef) {
		this.fields = textFields(col);
		this.mini = new MiniSearch({
			fields: this.fields,
			idField: "id",
			extractField: (doc, field) => textOf((doc as Record<string, unknown>)[field]) ?? "",
			tokenize,
			processTerm: (t) => (t.length > 64 ? null : t.toLowerCase()),
		});
	}

	get size(): number {
		return this.mini.documentCount;
	}

	/** Adds or replaces a live document (`id` plus its text fields); a soft-deleted one is removed. */
	upsert(doc: Doc | Record<string, unknown>): void {
		const id = String((doc as Record<string, unknown>).id ?? (doc as Record<string, unknown>)._id);
		if (this.mini.has(id)) this.mini.discard(id);
		if ((doc as Record<string, unknown>).deleted_at) return;
		const entry: Record<string, unknown> = { id };
		for (const f of this.fields) {
			const t = textOf((doc as Record<string, unknown>)[f]);
			if (t) entry[f] = t;
		}
		this.mini.add(entry);
	}

	remove(id: string): void {
		if (this.mini.has(id)) this.mini.discard(id);
	}

	clear(): void {
		this.mini.removeAll();
	}

	/**
	 * Every indexed document matching `q` in one of `fields`, best first (BM25 by MiniSearch; ties by id, so the order
	 * is stable). Terms match whole words, and the last term also as a prefix (typing ahead); case-insensitive.
	 */
	search(q: string, fields: string[]): Hit[] {
		const terms = tokenize(q).slice(0, MAX_QUERY_TERMS);
		if (!terms.length || !fields.length) return [];
		const last = terms.length - 1;
		const res = this.mini.search(terms.join(" "), {
			fields,
			prefix: (term, i) => i === last && term.length >= 3,
			combineWith: "OR",
		});
		return res.map((r) => ({ id: String(r.id), score: r.score })).sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
	}
}
