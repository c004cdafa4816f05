/**
 * The embedded store's appender writes each document as NeDB's `model.serialize` would (mixins/stores/nedb.append.ts):
 * the same bytes for documents with and without Dates, so a file written by either loads the same.
 */
import { serializeDoc } from "../../mixins/stores/nedb.append";
// eslint-disable-next-line @typescript-eslint/no-var-requires
const model = require("@seald-io/nedb/lib/model") as { serialize(doc: unknown): string; deserialize(s: string): unknown };

const docs: unknown[] = [
	{ _id: "a", title: "t", n: 1.5, ok: true, none: null, gone: undefined, tags: ["x", "y"], props: { deep: { list: [1, { k: "v" }, null] } } },
	{ _id: "b", text: 'quotes " and \\ and \u2028 and é', nan: NaN, inf: Infinity, arr: [undefined, () => 1] },
	{ $$deleted: true, _id: "c" },
	{ $$indexCreated: { fieldName: "owner", unique: false, sparse: false } },
	{ _id: "d", at: new Date(1_700_000_000_000) },
	{ _id: "e", nested: [{ when: new Date(0) }], plain: "z" },
	{ _id: "f", empty: {}, emptyList: [] },
];

test.each(docs.map((d, i) => [i, d]))("document %i: the bytes NeDB's serialize writes", (_i, doc) => {
	expect(serializeDoc(doc)).toBe(model.serialize(doc));
});

test("Dates still become $$date and load back as Dates", () => {
	const line = serializeDoc({ _id: "d", at: new Date(5), list: [new Date(6)] });
	expect(line).toBe('{"_id":"d","at":{"$$date":5},"list":[{"$$date":6}]}');
	const back = model.deserialize(line) as { at: Date; list: Date[] };
	expect(back.at).toBeInstanceOf(Date);
	expect(back.list[0].getTime()).toBe(6);
});
