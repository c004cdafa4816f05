/**
 * Relevance-ranked text search (docs/contracts.md "Other special actions", docs/search.md): one in-memory MiniSearch index
 * per searchable collection and node. The index finds the matching documents; it never decides what a caller sees. The
 * search action checks the matches against the document store through the caller's view (plan.filter), so zones, grant
 * rows, soft delete and tenants are applied by the store, then ranks the visible ones with the statistics of those
 * documents only (rank()): a document outside the view weighs on no score. Matching runs only over the text fields the
 * caller's grant lets it read (each field is indexed on its own).
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

/** A word as indexed and searched: lower-cased; a word longer than 64 characters is not indexed. */
const processTerm = (t: string): string | null => (t.length > 64 ? null : t.toLowerCase());

export interface Hit {
	id: string;
	score: number;
}

/** MiniSearch's BM25+ parameters and prefix weight (its defaults): the ranking below keeps its formula. */
const BM25 = { k: 1.2, b: 0.7, d: 0.5 };
const PREFIX_WEIGHT = 0.375;

/** Postings of one word: field id → short document id → term frequency. */
type Postings = Map<number, Map<number, number>>;

/**
 * What ranking reads of MiniSearch 7's index: its inverted index, field ids, field lengths (distinct words) and id maps
 * (the parts its own toJSON serialises). MiniSearch ranks with the statistics of the whole index, every tenant's
 * documents included; ranking within the caller's view needs the postings themselves.
 */
interface MiniIndex {
	_index: { get(term: string): Postings | undefined; atPrefix(prefix: string): Iterable<[string, Postings]> };
	_fieldIds: Record<string, number>;
	_fieldLength: Map<number, number[]>;
	_idToShortId: Map<string, number>;
	_documentIds: Map<number, string>;
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
			processTerm,
		});
	}

	get size(): number {
		return this.mini.documentCount;
	}

	/** Adds or replaces a live document (`id` plus its text fields); a soft-deleted one is removed. */
	upsert(doc: Doc | Record<string, unknown>): void {
		const id = String((doc as Record<string, unknown>).id);
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
	 * The indexed words `q` reaches, each with its weight, per query word: the word itself (1) and, for the last word of
	 * 3 letters or more, every longer word it begins (typing ahead; MiniSearch's prefix weight). Case-insensitive.
	 */
	private reach(q: string): Array<{ term: string; words: Array<[word: string, weight: number, postings: Postings]> }> {
		const index = (this.mini as unknown as MiniIndex)._index;
		const terms = tokenize(q)
			.slice(0, MAX_QUERY_TERMS)
			.map(processTerm)
			.filter((t): t is string => t !== null);
		return terms.map((term, i) => {
			const words: Array<[string, number, Postings]> = [];
			const exact = index.get(term);
			if (exact) words.push([term, 1, exact]);
			if (i === terms.length - 1 && term.length >= 3)
				for (const [word, postings] of index.atPrefix(term))
					if (word.length > term.length) words.push([word, (PREFIX_WEIGHT * word.length) / (word.length + 0.3 * (word.length - term.length)), postings]);
			return { term, words };
		});
	}

	/** Ids of every indexed document that `q` matches in one of `fields` (unordered: rank() orders them). */
	matches(q: string, fields: string[]): string[] {
		const mini = this.mini as unknown as MiniIndex;
		const fieldIds = fields.map((f) => mini._fieldIds[f]);
		const ids = new Set<string>();
		for (const { words } of this.reach(q))
			for (const [, , postings] of words)
				for (const fid of fieldIds)
					for (const sid of postings.get(fid)?.keys() ?? []) {
						const id = mini._documentIds.get(sid);
						if (id !== undefined) ids.add(id);
					}
		return [...ids];
	}

	/**
	 * `ids` (the documents of the caller's view that `q` matches) best first, ties by id, each with MiniSearch's score
	 * (BM25+ per field and matched word, summed, times the number of query words matched) computed from those documents
	 * only (docs/search.md, "Scores"): the document count is theirs, a word's document frequency counts those of them
	 * holding it in the field, the average field length is theirs. A document outside `ids` (another tenant's, one the
	 * view hides) changes no score.
	 */
	rank(q: string, fields: string[], ids: string[]): Hit[] {
		const mini = this.mini as unknown as MiniIndex;
		const docs = new Map<number, string>();
		for (const id of ids) {
			const sid = mini._idToShortId.get(id);
			if (sid !== undefined) docs.set(sid, id);
		}
		const n = docs.size;
		if (!n || !fields.length) return [];
		const fieldIds = fields.map((f) => mini._fieldIds[f]);
		const lengthOf = (sid: number, fid: number) => mini._fieldLength.get(sid)?.[fid] ?? 0;
		const avgLength = fieldIds.map((fid) => {
			let sum = 0;
			for (const sid of docs.keys()) sum += lengthOf(sid, fid);
			return sum / n;
		});
		const scores = new Map<number, number>();
		// Like MiniSearch, a document's sum is multiplied by how many distinct query words it matches.
		const matched = new Map<number, Set<string>>();
		for (const { term, words } of this.reach(q))
			for (const [, weight, postings] of words)
				fieldIds.forEach((fid, j) => {
					const freqs = postings.get(fid);
					if (!freqs) return;
					let df = 0;
					for (const sid of freqs.keys()) if (docs.has(sid)) df++;
					if (!df) return;
					const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
					for (const [sid, tf] of freqs) {
						if (!docs.has(sid)) continue;
						const norm = BM25.k * (1 - BM25.b + (BM25.b * lengthOf(sid, fid)) / avgLength[j]);
						scores.set(sid, (scores.get(sid) ?? 0) + weight * idf * (BM25.d + (tf * (BM25.k + 1)) / (tf + norm)));
						const terms = matched.get(sid);
						if (terms) terms.add(term);
						else matched.set(sid, new Set([term]));
					}
				});
		return [...scores]
			.map(([sid, score]) => ({ id: docs.get(sid)!, score: score * matched.get(sid)!.size }))
			.sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
	}
}
