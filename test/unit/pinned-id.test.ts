/**
 * A read whose filter pins one id is a primary-key read, the rest of the filter matched in memory
 * (stores/pg.store.ts findOne): which filters pin an id, and which do not.
 */
import { pinnedId } from "../../stores/pg.store";

describe("pinnedId", () => {
	it("an id equal to a string at the top, with $eq, or in a top-level $and (nested too)", () => {
		expect(pinnedId({ id: "a1" })).toBe("a1");
		expect(pinnedId({ id: { $eq: "a1" }, deleted_at: null })).toBe("a1");
		expect(pinnedId({ $and: [{ $or: [{ owner: "u" }, { shares: "u" }] }, { id: "a1" }] })).toBe("a1");
		expect(pinnedId({ $and: [{ deleted_at: null }, { $and: [{ id: "a1" }] }] })).toBe("a1");
	});

	it("no id pinned: a set of ids, an id under $or or $not, an operator beside $eq, a non-string id", () => {
		expect(pinnedId({})).toBeUndefined();
		expect(pinnedId({ id: { $in: ["a1"] } })).toBeUndefined();
		expect(pinnedId({ $or: [{ id: "a1" }, { id: "a2" }] })).toBeUndefined();
		expect(pinnedId({ $not: { id: "a1" } })).toBeUndefined();
		expect(pinnedId({ id: { $eq: "a1", $ne: "a2" } })).toBeUndefined();
		expect(pinnedId({ id: 7 })).toBeUndefined();
		expect(pinnedId({ id: { $eq: { x: 1 } } })).toBeUndefined();
	});
});
