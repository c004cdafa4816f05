import type { TokenClaims } from "../../lib/types";
import { reduceGroups, reduceGroupsInQuery, zoneFilter } from "../../lib/zones";

const base: TokenClaims = {
	type: "access",
	strict: false,
	cid: "c0c0c0c0c0c0c0c0c0c0c0c0",
	scope: "whole",
	domain: "root.local",
	subject: "",
	session: "s1",
	client_id: "c0c0c0c0c0c0c0c0c0c0c0c0",
};
const user: TokenClaims = { ...base, uid: "a1a1a1a1a1a1a1a1a1a1a1a1", aid: "b2b2b2b2b2b2b2b2b2b2b2b2", groups: ["eng@acme.com", "ops.acme.com"] };
const app: TokenClaims = { ...base, aid: "b2b2b2b2b2b2b2b2b2b2b2b2" };

describe("zoneFilter", () => {
	test("own uses the identity: uid, else aid, else cid", () => {
		expect(zoneFilter(["own"], user)).toEqual({ owner: user.uid });
		expect(zoneFilter(["own"], app)).toEqual({ owner: app.aid });
		expect(zoneFilter(["own"], base)).toEqual({ owner: base.cid });
	});
	test("share is array-contains by equality", () => {
		expect(zoneFilter(["share"], user)).toEqual({ shares: user.uid });
		expect(zoneFilter(["share"], base)).toEqual({ shares: base.cid });
	});
	test("group intersects memberships inside the caller's tenant (first entry of clients); no groups matches nothing", () => {
		expect(zoneFilter(["group"], user)).toEqual({ groups: { $in: ["eng@acme.com", "ops.acme.com"] }, "clients.0": user.cid });
		expect(zoneFilter(["group"], base)).toEqual({ groups: { $in: [] }, "clients.0": base.cid });
		expect(zoneFilter(["group"], { ...user, cid: "" })).toEqual({ groups: { $in: [] } });
	});
	test("client is the token cid", () => {
		expect(zoneFilter(["client"], user)).toEqual({ clients: user.cid });
	});
	test("several zones combine with $or, in order, de-duplicated", () => {
		expect(zoneFilter(["own", "share"], user)).toEqual({ $or: [{ owner: user.uid }, { shares: user.uid }] });
		expect(zoneFilter(["client", "group", "own", "client"], user)).toEqual({
			$or: [{ clients: user.cid }, { groups: { $in: user.groups }, "clients.0": user.cid }, { owner: user.uid }],
		});
	});
	test("empty list is the default own,share; unknown zone is 400", () => {
		expect(zoneFilter([], user)).toEqual({ $or: [{ owner: user.uid }, { shares: user.uid }] });
		expect(() => zoneFilter(["everyone"], user)).toThrow(expect.objectContaining({ code: 400 }));
	});
	test("the group condition does not share the token's array", () => {
		const f = zoneFilter(["group"], user) as { groups: { $in: string[] } };
		f.groups.$in.push("x");
		expect(user.groups).toEqual(["eng@acme.com", "ops.acme.com"]);
	});
});

describe("reduceGroups", () => {
	const mine = ["eng@acme.com", "ops.acme.com"];
	test("a single name is kept when it is a membership", () => {
		expect(reduceGroups("eng@acme.com", mine)).toBe("eng@acme.com");
		expect(reduceGroups("board@acme.com", mine)).toEqual({ $in: [] });
	});
	test("$in keeps memberships only", () => {
		expect(reduceGroups({ $in: ["eng@acme.com", "board@acme.com"] }, mine)).toEqual({ $in: ["eng@acme.com"] });
		expect(reduceGroups({ $in: ["board@acme.com"] }, mine)).toEqual({ $in: [] });
	});
	test("$all and $eq are reduced; emptied they match nothing", () => {
		expect(reduceGroups({ $all: ["ops.acme.com", "board@acme.com"] }, mine)).toEqual({ $all: ["ops.acme.com"] });
		expect(reduceGroups({ $all: ["board@acme.com"] }, mine)).toEqual({ $in: [] });
		expect(reduceGroups({ $eq: "ops.acme.com" }, mine)).toEqual({ $eq: "ops.acme.com" });
		expect(reduceGroups({ $eq: "board@acme.com" }, mine)).toEqual({ $in: [] });
	});
	test("arrays are reduced in place of exact equality", () => {
		expect(reduceGroups(["board@acme.com", "ops.acme.com"], mine)).toEqual(["ops.acme.com"]);
		expect(reduceGroups(["board@acme.com"], mine)).toEqual({ $in: [] });
	});
	test("negative operators keep memberships, drop others; probing operators are dropped", () => {
		expect(reduceGroups({ $in: ["eng@acme.com"], $nin: ["ops.acme.com", "board@acme.com"] }, mine)).toEqual({
			$in: ["eng@acme.com"],
			$nin: ["ops.acme.com"],
		});
		expect(reduceGroups({ $in: ["eng@acme.com"], $regex: "^board" }, mine)).toEqual({ $in: ["eng@acme.com"] });
		expect(reduceGroups({ $regex: "^board" }, mine)).toEqual({ $in: [] });
		expect(reduceGroups({ $ne: "board@acme.com" }, mine)).toEqual({ $in: [] });
		expect(reduceGroups(42, mine)).toEqual({ $in: [] });
	});
	test("no memberships leaves nothing", () => {
		expect(reduceGroups({ $in: ["eng@acme.com"] }, [])).toEqual({ $in: [] });
	});
});

describe("reduceGroupsInQuery", () => {
	const mine = ["eng@acme.com"];
	test("top level, $or/$and nested, dotted keys; other keys untouched; input not mutated", () => {
		const q = {
			title: "x",
			groups: { $in: ["eng@acme.com", "board@acme.com"] },
			$or: [{ groups: "board@acme.com" }, { $and: [{ "groups.0": "eng@acme.com" }, { tags: "a" }] }],
			$not: { groups: "board@acme.com" },
		};
		const snapshot = JSON.parse(JSON.stringify(q));
		expect(reduceGroupsInQuery(q, mine)).toEqual({
			title: "x",
			groups: { $in: ["eng@acme.com"] },
			$or: [{ groups: { $in: [] } }, { $and: [{ "groups.0": "eng@acme.com" }, { tags: "a" }] }],
			$not: { groups: { $in: [] } },
		});
		expect(q).toEqual(snapshot);
	});
	test("a query without groups comes back equal", () => {
		expect(reduceGroupsInQuery({ a: 1, $or: [{ b: 2 }] }, mine)).toEqual({ a: 1, $or: [{ b: 2 }] });
	});
});
