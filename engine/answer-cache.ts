/**
 * The answers of `get` made from a kept document (stores/doc-cache.ts): per document object and field set, the answer
 * body and its JSON text, made once and shared by every read of that document with that field set.
 *
 * Invariant: an answer is a function of the kept document (frozen, and replaced by another object when the document
 * changes), the collection's presentation (the same for every read of its documents) and the caller's readable
 * fields (the key). The caller's authority is decided for every read before the document is read (the access plan:
 * grants, zone, row filter, fields), so a grant, role or revocation that changed takes effect at the next read; what
 * is kept here never decides who may read. Bodies are frozen: the gateway sends their text as it was made.
 */
import type { StoredDoc } from "../stores";
import type { Doc } from "../lib/types";

export interface KeptAnswer {
	body: { data: Doc };
	tag: string;
}

const answers = new WeakMap<StoredDoc, Map<string, KeptAnswer>>();
const texts = new WeakMap<object, string>();

/** The field set's key: every field, or the readable ones in the plan's order. */
const keyOf = (fields: readonly string[] | null) => (fields ? fields.join("\0") : "*");

/** The answer of a read of the kept document `stored` with `fields`, made by `make` the first time. */
export function keptAnswer(stored: StoredDoc, fields: readonly string[] | null, make: () => KeptAnswer): KeptAnswer {
	let byFields = answers.get(stored);
	if (!byFields) answers.set(stored, (byFields = new Map()));
	const key = keyOf(fields);
	let a = byFields.get(key);
	if (!a) {
		a = make();
		Object.freeze(a.body.data);
		Object.freeze(a.body);
		texts.set(a.body, JSON.stringify(a.body));
		byFields.set(key, a);
	}
	return a;
}

/** The JSON text of a kept answer body (the gateway sends it instead of serializing the body again). */
export function answerText(body: unknown): string | undefined {
	return typeof body === "object" && body !== null ? texts.get(body) : undefined;
}
