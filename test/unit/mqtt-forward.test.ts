/**
 * The embedded broker's per-message decision (workers/preserver/forward.ts): the holder's view of the topic's zone
 * with the grants of the moment; images it does not admit left out, fields it hides absent, the payload itself when
 * nothing is hidden.
 */
import { GrantIndex, type Grant } from "../../lib/grants";
import type { TokenClaims } from "../../lib/types";
import { ForwardViews } from "../../workers/preserver/forward";

const UID = "64a000000000000000000001";
const OTHER = "64a000000000000000000009";
const CID = "64c000000000000000000002";
const ID = "64f000000000000000000003";
const token = (over: Partial<TokenClaims> = {}): TokenClaims => ({
	type: "access",
	strict: false,
	cid: CID,
	uid: UID,
	scope: "whole",
	domain: "d.local",
	subject: `${UID}@d.local`,
	session: "s",
	client_id: CID,
	...over,
});
const grants = (...g: Grant[]) => new GrantIndex(g);
const readNotes = (over: Partial<Grant> = {}): Grant => ({ subject: `${UID}@d.local`, action: "read", object: "content:notes", ...over });
const doc = (over: Record<string, unknown> = {}) => ({ id: ID, owner: UID, shares: [], clients: [CID], title: "t", content: "c", deleted_at: null, ...over });
const event = (before?: Record<string, unknown>, after?: Record<string, unknown>) =>
	Buffer.from(
		JSON.stringify({
			id: ID,
			ts_ms: 1,
			op: before && after ? "u" : after ? "c" : "d",
			topic: "content.notes",
			source: { name: "platform", db: "content", collection: "notes" },
			...(before ? { before } : {}),
			...(after ? { after } : {}),
		}),
	);
const owner = `platform/owner/${UID}/content/notes/${ID}`;
const parse = (b: Buffer | null) => (b ? JSON.parse(b.toString("utf8")) : null);

describe("ForwardViews.payloadFor", () => {
	test("an unrestricted view admitting every image: the payload itself, not a copy", () => {
		const payload = event(doc(), doc({ title: "u" }));
		expect(new ForwardViews("platform").payloadFor(token(), grants(readNotes()), owner, payload)).toBe(payload);
	});

	test("no grant any more, or no read scope: not delivered", () => {
		const v = new ForwardViews("platform");
		expect(v.payloadFor(token(), grants(), owner, event(undefined, doc()))).toBeNull();
		expect(v.payloadFor(token({ scope: "read:content:posts" }), grants(readNotes()), owner, event(undefined, doc()))).toBeNull();
	});

	test("a field list: each image through it, the event's other keys kept", () => {
		const body = parse(new ForwardViews("platform").payloadFor(token(), grants(readNotes({ field: ["title"] })), owner, event(doc(), doc({ title: "u" }))));
		expect(body).toEqual({
			id: ID,
			ts_ms: 1,
			op: "u",
			topic: "content.notes",
			source: { name: "platform", db: "content", collection: "notes" },
			before: { id: ID, title: "t" },
			after: { id: ID, title: "u" },
		});
	});

	test("a row filter: a change outside the rows is not delivered; an image outside them is left out", () => {
		const g = grants(readNotes({ filter: ['{"content":"public"}'] }));
		const v = new ForwardViews("platform");
		expect(v.payloadFor(token(), g, owner, event(doc(), doc({ title: "u" })))).toBeNull();
		const entering = parse(v.payloadFor(token(), g, owner, event(doc(), doc({ content: "public" }))));
		expect(entering.before).toBeUndefined();
		expect(entering.after).toMatchObject({ id: ID, content: "public" });
	});

	test("the topic's zone: an image of another owner (before a transfer) is left out of the owner topic", () => {
		const body = parse(new ForwardViews("platform").payloadFor(token(), grants(readNotes()), owner, event(doc({ owner: OTHER }), doc())));
		expect(body.before).toBeUndefined();
		expect(body.after).toMatchObject({ id: ID, owner: UID });
	});

	test("share and client topics are decided in their own zones", () => {
		const g = grants(readNotes());
		const v = new ForwardViews("platform");
		const shared = doc({ owner: OTHER, shares: [UID] });
		expect(v.payloadFor(token(), g, `platform/share/${UID}/content/notes/${ID}`, event(undefined, shared))).not.toBeNull();
		expect(v.payloadFor(token(), g, `platform/share/${UID}/content/notes/${ID}`, event(undefined, doc({ owner: OTHER })))).toBeNull();
		expect(v.payloadFor(token(), g, `platform/client/${CID}/content/notes/${ID}`, event(undefined, doc({ owner: OTHER })))).not.toBeNull();
		expect(v.payloadFor(token(), g, `platform/client/${CID}/content/notes/${ID}`, event(undefined, doc({ owner: OTHER, clients: ["64c000000000000000000008"] })))).toBeNull();
	});

	test("deletes and restores are changes of the zone's documents (no soft-delete condition)", () => {
		const g = grants(readNotes());
		const v = new ForwardViews("platform");
		const deleted = doc({ deleted_at: "2024-01-01T00:00:00.000Z" });
		expect(parse(v.payloadFor(token(), g, owner, event(deleted, doc())))).toMatchObject({ before: { deleted_at: "2024-01-01T00:00:00.000Z" }, after: { deleted_at: null } });
		expect(parse(v.payloadFor(token(), g, owner, event(doc(), undefined)))).toMatchObject({ op: "d", before: { id: ID } });
	});

	test("never delivered: another identity's or client's topic, another root, an unknown collection, a payload that is no change event", () => {
		const g = grants(readNotes(), { subject: `${UID}@d.local`, action: "read", object: "content:*" });
		const v = new ForwardViews("platform");
		const p = event(undefined, doc({ owner: OTHER, shares: [OTHER], clients: ["64c000000000000000000008"] }));
		expect(v.payloadFor(token(), g, `platform/owner/${OTHER}/content/notes/${ID}`, p)).toBeNull();
		expect(v.payloadFor(token(), g, `platform/client/64c000000000000000000008/content/notes/${ID}`, p)).toBeNull();
		expect(v.payloadFor(token(), g, `other/owner/${UID}/content/notes/${ID}`, event(undefined, doc()))).toBeNull();
		expect(v.payloadFor(token(), g, `platform/owner/${UID}/content/nope/${ID}`, event(undefined, doc()))).toBeNull();
		expect(v.payloadFor(token(), g, `platform/owner/${UID}/content/notes`, event(undefined, doc()))).toBeNull();
		expect(v.payloadFor(token(), g, owner, Buffer.from("not json"))).toBeNull();
		expect(v.payloadFor(token(), g, owner, Buffer.from(JSON.stringify({ after: "x" })))).toBeNull();
	});

	test("the grants of the moment: the same holder, the same topic, a narrower index next time", () => {
		const v = new ForwardViews("platform");
		const payload = event(undefined, doc());
		expect(v.payloadFor(token(), grants(readNotes()), owner, payload)).toBe(payload);
		expect(parse(v.payloadFor(token(), grants(readNotes({ field: ["title"] })), owner, payload)).after).toEqual({ id: ID, title: "t" });
		expect(v.payloadFor(token(), grants(), owner, payload)).toBeNull();
	});
});
