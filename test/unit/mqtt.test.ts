/** lib/mqtt.ts: the topic scheme, the subscribe/publish rules, the payload. */
import { GrantIndex, type Grant } from "../../lib/grants";
import { authorizePublish, authorizeSubscribe, changeTopics, filterLevels, mqttPayload, publisherPassword } from "../../lib/mqtt";
import type { TokenClaims } from "../../lib/types";

const UID = "64a000000000000000000001";
const CID = "64c000000000000000000002";
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
const readNotes: Grant = { subject: `${UID}@d.local`, action: "read", object: "content:notes" };

describe("changeTopics", () => {
	const rec = { event: { id: "n1", source: { db: "content", collection: "notes" } }, owner: UID, shares: ["u2", "u3"], clients: [CID, "c2"] };

	test("owner, each share, each client", () => {
		expect(changeTopics("platform", rec)).toEqual([
			`platform/owner/${UID}/content/notes/n1`,
			"platform/share/u2/content/notes/n1",
			"platform/share/u3/content/notes/n1",
			`platform/client/${CID}/content/notes/n1`,
			"platform/client/c2/content/notes/n1",
		]);
	});

	test("multi-level roots; ids that cannot be a level are skipped; duplicates collapse", () => {
		const t = changeTopics("a/b", { ...rec, shares: ["x/y", "#", "", "u2", "u2"], clients: ["+"], owner: undefined });
		expect(t).toEqual(["a/b/share/u2/content/notes/n1"]);
		expect(changeTopics("p", { ...rec, event: { ...rec.event, id: "a/b" } })).toEqual([]);
	});
});

describe("filterLevels", () => {
	test.each([["a/b/#"], ["a/+/c"], ["#"], ["+"]])("%s is a valid filter", (f) => expect(filterLevels(f)).not.toBeNull());
	test.each([["a/#/c"], ["a/b#"], ["a/+b/c"], [""], ["a\u0000b"]])("%j is malformed", (f) => expect(filterLevels(f)).toBeNull());
});

describe("authorizeSubscribe", () => {
	const allow = (filter: string, t = token(), g = grants(readNotes)) => authorizeSubscribe({ root: "platform", token: t, filter, grants: g }).allow;

	test("own owner, share and client topics of a readable collection", () => {
		expect(allow(`platform/owner/${UID}/content/notes/#`)).toBe(true);
		expect(allow(`platform/owner/${UID}/content/notes/+`)).toBe(true);
		expect(allow(`platform/owner/${UID}/content/notes/abc`)).toBe(true);
		expect(allow(`platform/owner/${UID}/content/notes`)).toBe(true);
		expect(allow(`platform/share/${UID}/content/notes/#`)).toBe(true);
		expect(allow(`platform/client/${CID}/content/notes/#`)).toBe(true);
	});

	test("other identities, other clients, other roots, shared subscriptions, malformed filters", () => {
		expect(allow(`platform/owner/someone/content/notes/#`)).toBe(false);
		expect(allow(`platform/owner/+/content/notes/#`)).toBe(false);
		expect(allow(`platform/share/someone/content/notes/#`)).toBe(false);
		expect(allow(`platform/client/${UID}/content/notes/#`)).toBe(false);
		expect(allow(`platform/owner/${CID}/content/notes/#`)).toBe(false);
		expect(allow(`other/owner/${UID}/content/notes/#`)).toBe(false);
		expect(allow(`platform/#`)).toBe(false);
		expect(allow(`#`)).toBe(false);
		expect(allow(`$share/g/platform/owner/${UID}/content/notes/#`)).toBe(false);
		expect(allow(`platform/owner/${UID}`)).toBe(false);
		expect(allow(`platform/owner/${UID}/content`)).toBe(false);
		expect(allow(`platform/owner/${UID}/content/nope/#`)).toBe(false);
		expect(allow(`platform/things/${UID}/content/notes/#`)).toBe(false);
	});

	test("identity is uid, else aid, else cid", () => {
		const app = token({ uid: undefined, aid: "app1", subject: "app1@d.local" });
		const g = grants({ ...readNotes, subject: "app1@d.local" });
		expect(allow(`platform/owner/app1/content/notes/#`, app, g)).toBe(true);
		const cc = token({ uid: undefined, subject: `${CID}@d.local` });
		expect(allow(`platform/owner/${CID}/content/notes/#`, cc, grants({ ...readNotes, subject: `${CID}@d.local` }))).toBe(true);
	});

	test("scope and grant must both cover read; a write or manage grant does", () => {
		expect(allow(`platform/owner/${UID}/content/posts/#`)).toBe(false);
		expect(allow(`platform/owner/${UID}/content/notes/#`, token({ scope: "read:content:posts" }))).toBe(false);
		expect(allow(`platform/owner/${UID}/content/notes/#`, token({ scope: "write:content" }))).toBe(true);
		expect(allow(`platform/owner/${UID}/content/notes/#`, token(), grants({ ...readNotes, action: "manage", object: "content:*" }))).toBe(true);
		expect(allow(`platform/owner/${UID}/content/notes/#`, token(), grants())).toBe(false);
	});

	test("restricted grants (fields or row filter) are for the REST API only", () => {
		expect(allow(`platform/owner/${UID}/content/notes/#`, token(), grants({ ...readNotes, field: ["title"] }))).toBe(false);
		expect(allow(`platform/owner/${UID}/content/notes/#`, token(), grants({ ...readNotes, filter: ['{"title":"x"}'] }))).toBe(false);
		// An unrestricted grant beside a restricted one widens access (grants combine by OR).
		expect(allow(`platform/owner/${UID}/content/notes/#`, token(), grants({ ...readNotes, field: ["title"] }, readNotes))).toBe(true);
	});

	test("wildcards over services or collections only when every collection they match is readable", () => {
		expect(allow(`platform/owner/${UID}/content/+/#`)).toBe(false);
		expect(allow(`platform/owner/${UID}/#`)).toBe(false);
		const all = grants(
			...["auth", "domain", "context", "essential", "financial", "general", "identity", "special", "touch", "content", "logistic", "conjoint", "career", "thing"].map((s) => ({
				subject: `${UID}@d.local`,
				action: "manage",
				object: `${s}:*`,
			})),
		);
		expect(allow(`platform/owner/${UID}/#`, token(), all)).toBe(true);
		expect(allow(`platform/owner/${UID}/+/notes/#`, token(), grants(readNotes))).toBe(true);
		expect(allow(`platform/owner/${UID}/content/+/#`, token(), grants({ ...readNotes, object: "content:*" }))).toBe(true);
	});
});

describe("authorizePublish", () => {
	test("only the publisher, only under the root, never with wildcards", () => {
		expect(authorizePublish("platform", true, "platform/owner/u/content/notes/1").allow).toBe(true);
		expect(authorizePublish("platform", false, "platform/owner/u/content/notes/1").allow).toBe(false);
		expect(authorizePublish("platform", false, "anything").allow).toBe(false);
		expect(authorizePublish("platform", true, "elsewhere/x").allow).toBe(false);
		expect(authorizePublish("platform", true, "platformx/y").allow).toBe(false);
		expect(authorizePublish("platform", true, "platform/+/x").allow).toBe(false);
	});

	test("the publisher's password follows from the JWT secret", () => {
		expect(publisherPassword("k1")).toBe(publisherPassword("k1"));
		expect(publisherPassword("k1")).not.toBe(publisherPassword("k2"));
	});
});

describe("mqttPayload", () => {
	test("the change event as JSON; CQRS webhook credentials removed", () => {
		const ev = { id: "n", ts_ms: 1, op: "u", topic: "content.notes", source: { name: "platform", db: "content", collection: "notes" }, after: { id: "n", title: "t" } };
		expect(JSON.parse(mqttPayload(ev))).toEqual(ev);
		const cfg = {
			...ev,
			topic: "context.configs",
			before: { id: "c", key: "CQRS", value: { webhook: "https://x", secret: "s3", authorization: "Bearer z" } },
			after: { id: "c", key: "CQRS", value: { webhook: "https://y", secret: "s4" } },
		};
		const out = JSON.parse(mqttPayload(cfg));
		expect(out.before.value).toEqual({ webhook: "https://x" });
		expect(out.after.value).toEqual({ webhook: "https://y" });
		expect(JSON.stringify(out)).not.toMatch(/s3|s4|Bearer z/);
	});
});
