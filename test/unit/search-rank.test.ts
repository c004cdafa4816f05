/**
 * CollectionIndex.rank (lib/search.ts): MiniSearch's score, computed over the documents given (the caller's visible
 * matches) only. Over every document of the index it is MiniSearch's own score; documents outside the set change
 * nothing.
 */
import MiniSearch from "minisearch";
import { content } from "../../catalog/domains/content";
import { CollectionIndex, textFields, tokenize } from "../../lib/search";

const POSTS = content.collections.find((c) => c.name === "posts")!;

const CORPUS: Array<[string, string, string, string[]?]> = [
	["a1", "Rust ownership", "rust ownership and borrowing, ownership again"],
	["a2", "A guide", "a long guide on the ownership of a rusty bike and of rust"],
	["a3", "Rust", "garden tools get rust in the rain", ["rust", "garden"]],
	["a4", "Ownerships registry", "registry of deeds"],
	["a5", "Rusting bridges", "ownership of bridges that rust"],
];

function indexOf(docs: typeof CORPUS): CollectionIndex {
	const index = new CollectionIndex(POSTS);
	for (const [id, title, content, tags] of docs) index.upsert({ id, title, content, ...(tags ? { tags } : {}) });
	return index;
}

const ranked = (index: CollectionIndex, q: string, ids?: string[]) => {
	const fields = index.fields;
	return index.rank(q, fields, ids ?? index.matches(q, fields));
};

test("over every document of the index (all of them match), the score is MiniSearch's own", () => {
	const fields = textFields(POSTS);
	const mini = new MiniSearch({
		fields,
		idField: "id",
		extractField: (doc, f) => {
			const v = (doc as Record<string, unknown>)[f];
			return Array.isArray(v) ? v.join(" ") : ((v as string) ?? "");
		},
		tokenize,
		processTerm: (t) => (t.length > 64 ? null : t.toLowerCase()),
	});
	for (const [id, title, content, tags] of CORPUS) mini.add({ id, title, content, ...(tags ? { tags } : {}) });
	const index = indexOf(CORPUS);
	for (const q of ["rust owner", "rust rust owner", "ownership rust registry"]) {
		const theirs = mini.search(q, { fields, prefix: (t, i, all) => i === all.length - 1 && t.length >= 3, combineWith: "OR" });
		expect(theirs).toHaveLength(CORPUS.length);
		const ours = ranked(index, q);
		expect(ours.map((h) => h.id)).toEqual(theirs.map((r) => String(r.id)));
		ours.forEach((h, i) => expect(h.score).toBeCloseTo(theirs[i].score, 9));
	}
});

test("documents outside the given set change no score, however many and however close a match", () => {
	const alone = indexOf(CORPUS);
	const crowded = indexOf([
		...CORPUS,
		...Array.from({ length: 200 }, (_, i) => [`b${i}`, i % 2 ? "rust" : "ownership ownership", `rust ${"ownership ".repeat(i % 7)}${i}`] as [string, string, string]),
	]);
	const visible = CORPUS.map(([id]) => id);
	for (const q of ["rust ownership", "owner", "rust bridges"]) {
		const expected = ranked(
			alone,
			q,
			visible.filter((id) => alone.matches(q, alone.fields).includes(id)),
		);
		expect(
			ranked(
				crowded,
				q,
				visible.filter((id) => crowded.matches(q, crowded.fields).includes(id)),
			),
		).toEqual(expected);
	}
	// The other documents are found, and ranked, when they are in the set.
	expect(crowded.matches("rust", crowded.fields)).toHaveLength(204);
});

test("matches: whole words, the last word also as a prefix (3 letters or more), only the fields given, removed documents gone", () => {
	const index = indexOf(CORPUS);
	expect(index.matches("owner", index.fields).sort()).toEqual(["a1", "a2", "a4", "a5"]);
	expect(index.matches("owner pasta", index.fields)).toEqual([]);
	expect(index.matches("ow", index.fields)).toEqual([]);
	expect(index.matches("garden", ["tags"])).toEqual(["a3"]);
	expect(index.matches("registry", ["content"])).toEqual(["a4"]);
	index.remove("a4");
	index.upsert({ id: "a1", title: "Cooking", content: "pasta" });
	expect(index.matches("registry", index.fields)).toEqual([]);
	expect(index.matches("rust", index.fields).sort()).toEqual(["a2", "a3", "a5"]);
	expect(ranked(index, "rust", ["a1", "a2", "nope"]).map((h) => h.id)).toEqual(["a2"]);
});
