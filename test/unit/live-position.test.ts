/**
 * Live cursor positions (services/api/live-position.ts): sealed for one stream, opened only by it, with the same
 * deployment key on any gateway; the stream is its principal and view, not its token or its spelling.
 */
import { Positions, streamOf } from "../../services/api/live-position";

const alice = { uid: "u-alice", cid: "c-tenant-a" };
const notes = (query: Record<string, unknown> = {}, headers: Record<string, string> = {}, token: { uid?: string; aid?: string; cid: string } = alice, topic = "content.notes") =>
	streamOf(token, topic, { live: "true", ...query }, headers);

describe("live cursor positions", () => {
	const P = new Positions("deployment-secret");
	const mine = P.of(notes());

	test("a position opens to what it sealed, for its stream only, on any gateway of the deployment", () => {
		for (const [base, upto] of [
			[1, 1],
			[0, 0],
			[41, 97],
			[Date.now() * 1000, Date.now() * 1000 + 5],
		]) {
			const text = mine.seal(base, upto);
			expect(text).toMatch(/^L[A-Za-z0-9_-]{38}$/);
			expect(mine.open(text)).toEqual({ base, upto });
			// Another gateway: the same secret, keys derived anew.
			const other = new Positions("deployment-secret");
			expect(other.of(notes()).open(text)).toEqual({ base, upto });
			expect(new Positions("another-deployment").of(notes()).open(text)).toBeUndefined();
		}
		expect(mine.open(mine.seal(7))).toEqual({ base: 7, upto: 7 });
	});

	test("another stream's position, or one changed in any character, opens to nothing", () => {
		const text = mine.seal(1234, 1300);
		for (const stream of [
			notes({}, {}, { uid: "u-bob", cid: "c-tenant-a" }),
			notes({}, {}, { uid: "u-alice", cid: "c-tenant-b" }),
			notes({}, {}, alice, "content.tickets"),
			notes({ query: '{"title":"x"}' }),
			notes({ zone: "own,share,client" }),
			notes({ projection: '{"title":1}' }),
			notes({}, { "x-exclude-soft-delete-query": "1" }),
		])
			expect(P.of(stream).open(text)).toBeUndefined();
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
		for (let i = 1; i < text.length; i++) {
			const c = alphabet[(alphabet.indexOf(text[i]) + 1) % 64];
			expect(mine.open(text.slice(0, i) + c + text.slice(i + 1))).toBeUndefined();
		}
		for (const made of ["", "L", "L1", "Lhol0spz6p4", text.slice(0, -1), `${text}A`, `l${text.slice(1)}`, "0123456789abcdef01234567"]) expect(mine.open(made)).toBeUndefined();
	});

	test("hides the counter: consecutive positions share no prefix, and equal positions of two streams differ", () => {
		const a = mine.seal(1000);
		const b = mine.seal(1001);
		expect(a.slice(0, 8)).not.toBe(b.slice(0, 8));
		expect(P.of(notes({}, {}, { uid: "u-bob", cid: "c-tenant-a" })).seal(1000)).not.toBe(a);
	});

	test("the stream is the principal and the view: the token's other claims, key order and zone order do not count", () => {
		expect(notes({}, {}, { ...alice, jti: "session-1", exp: 1 } as any)).toBe(notes({}, {}, { ...alice, jti: "session-2", exp: 2 } as any));
		expect(notes({ query: '{"b":1,"a":{"y":2,"x":[1,{"q":1,"p":2}]}}', zone: "share,own" })).toBe(
			notes({ query: { a: { x: [1, { p: 2, q: 1 }], y: 2 }, b: 1 }, zone: ["own", "share"] }),
		);
		expect(notes({ zone: "own,share" })).toBe(notes());
		expect(notes({}, { "x-zone": "client" })).toBe(notes({ zone: "client" }));
		// An array's order is part of the query.
		expect(notes({ query: '{"a":{"$in":[1,2]}}' })).not.toBe(notes({ query: '{"a":{"$in":[2,1]}}' }));
	});
});
