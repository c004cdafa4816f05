/**
 * The Authenticator decides a user's token with what the user holds now (authority/authenticate.ts): its subjects
 * and groups narrowed to the user's current roles and groups (never widened), its app's subject kept, refused when
 * the user is gone or INACTIVE; the user read once per node per 30 s, again at once after USER_CHANGED, on every
 * request during a clustered node's first 10 s, and not kept when a change was heard while reading it.
 */
import type { ServiceBroker } from "moleculer";
import { Authenticator } from "../../authority/authenticate";
import { Aes } from "../../lib/crypto";
import { MemoryKeyValue } from "../../runtime/kv";
import { JwtKeys } from "../../lib/tokens";
import type { TokenClaims } from "../../lib/types";

const SECRET = "y".repeat(48);
const D = "a.example";
const UID = "0123456789abcdef01234567";

type User = { id: string; username?: string; subjects: string[]; status?: string } | null;

function setup({ clustered = false, claims = {} as Partial<TokenClaims> } = {}) {
	const users = new Map<string, User>([[UID, { id: UID, username: "bob", subjects: ["@editor", "team.example"], status: "ACTIVE" }]]);
	const reads = { n: 0, gate: undefined as Promise<void> | undefined };
	const call = async (action: string, params: { id: string }) => {
		if (action === "identity.sessions.live") return { live: true };
		if (action !== "identity.users.byId") throw new Error(`unexpected call ${action}`);
		reads.n++;
		const answer = users.get(params.id) ?? null;
		await reads.gate;
		return answer && { ...answer, subjects: [...answer.subjects] };
	};
	const broker = { call, transit: clustered ? {} : undefined } as unknown as ServiceBroker;
	const jwt = new JwtKeys(SECRET);
	const auth = new Authenticator({ jwt, aes: new Aes(SECRET), kv: new MemoryKeyValue(), broker, trustProxy: false });
	const token = jwt.sign(
		{
			type: "access",
			strict: false,
			uid: UID,
			aid: "a1",
			cid: "c1",
			client_id: "c1",
			session: "s1",
			scope: "whole",
			domain: D,
			subject: `@editor@${D} team.example@${D} ${UID}@${D} bob@${D} a1@${D}`,
			groups: ["team.example"],
			...claims,
		} as never,
		900,
	);
	const req = { headers: { authorization: `Bearer ${token}` } };
	const setUser = (u: User) => users.set(UID, u);
	return { auth, req, reads, setUser, decided: async () => (await auth.authenticate(req)).token };
}

afterEach(() => jest.useRealTimers());

test("a role taken away leaves the token's subjects; a group taken away leaves its subjects and groups; the app's subject stays", async () => {
	const { auth, setUser, decided } = setup();
	const whole = await decided();
	expect([whole.subject, whole.groups]).toEqual([`@editor@${D} team.example@${D} ${UID}@${D} bob@${D} a1@${D}`, ["team.example"]]);
	setUser({ id: UID, username: "bob", subjects: ["team.example"], status: "ACTIVE" });
	auth.userChanged([UID]);
	const noRole = await decided();
	expect([noRole.subject, noRole.groups]).toEqual([`team.example@${D} ${UID}@${D} bob@${D} a1@${D}`, ["team.example"]]);
	setUser({ id: UID, username: "bob", subjects: [], status: "ACTIVE" });
	auth.userChanged([UID]);
	const none = await decided();
	expect([none.subject, "groups" in none]).toEqual([`${UID}@${D} bob@${D} a1@${D}`, false]);
	// Renamed: the old name is no subject of the user any more.
	setUser({ id: UID, username: "robert", subjects: [], status: "ACTIVE" });
	auth.userChanged([UID]);
	expect((await decided()).subject).toBe(`${UID}@${D} a1@${D}`);
});

test("never more than the token carries: a role added later is not in it (the next refresh brings it)", async () => {
	const { auth, setUser, decided } = setup();
	setUser({ id: UID, username: "bob", subjects: ["@editor", "team.example", "@admin", "ops.example"], status: "ACTIVE" });
	auth.userChanged([UID]);
	const t = await decided();
	expect([t.subject, t.groups]).toEqual([`@editor@${D} team.example@${D} ${UID}@${D} bob@${D} a1@${D}`, ["team.example"]]);
});

test("while nothing is taken away, every request gets the same claims object (nothing allocated)", async () => {
	const { decided } = setup();
	expect(await decided()).toBe(await decided());
});

test.each([
	["INACTIVE", { id: UID, subjects: ["@editor"], status: "INACTIVE" }],
	["deleted", null],
])("a user %s: 401 `session is revoked`, its reason in WWW-Authenticate; a logout still passes", async (_name, user) => {
	const { auth, req, setUser } = setup();
	await auth.authenticate(req);
	setUser(user as User);
	auth.userChanged([UID]);
	await expect(auth.authenticate(req)).rejects.toMatchObject({
		code: 401,
		message: "session is revoked",
		data: { wwwAuthenticate: 'Bearer error="invalid_token", error_description="the session is revoked"' },
	});
	await expect(auth.authenticate(req, { allowRevoked: true })).resolves.toMatchObject({ kind: "jwt" });
});

test("one read per user per 30 s; USER_CHANGED reads again at once; a token without a user reads none", async () => {
	jest.useFakeTimers({ now: Date.now(), doNotFake: ["nextTick", "setImmediate", "queueMicrotask"] });
	const { auth, reads, decided } = setup();
	await decided();
	await decided();
	expect(reads.n).toBe(1);
	auth.userChanged(["ffffffffffffffffffffffff", 42, UID]);
	await decided();
	expect(reads.n).toBe(2);
	jest.setSystemTime(Date.now() + 30_000);
	await decided();
	expect(reads.n).toBe(3);
	const client = setup({ claims: { uid: undefined, aid: undefined, subject: `c1@${D}`, groups: undefined } });
	await client.decided();
	expect(client.reads.n).toBe(0);
});

test("a clustered node reads the user on every request of its first 10 s (a change announced by a peer that does not know it yet)", async () => {
	const { reads, decided } = setup({ clustered: true });
	await decided();
	await decided();
	expect(reads.n).toBe(2);
});

test("a change heard while the user is read: that answer serves the requests waiting on it, and is not kept", async () => {
	const { auth, reads, setUser, decided } = setup();
	let open!: () => void;
	reads.gate = new Promise((r) => (open = r));
	const first = decided();
	await new Promise((r) => setImmediate(r));
	setUser({ id: UID, username: "bob", subjects: [], status: "ACTIVE" });
	auth.userChanged([UID]);
	open();
	expect((await first).subject).toContain("@editor");
	reads.gate = undefined;
	expect((await decided()).subject).toBe(`${UID}@${D} bob@${D} a1@${D}`);
	expect(reads.n).toBe(2);
});
