/**
 * Failed logins limited per account and per client and IP, never across tenants, and operators who list and lift the
 * blocks (issue 33 item 3; docs/security.md "Failed logins"), on both document stores with the two tenants of
 * test/helpers/tenants.ts (both have a user `member`) and the operator. Callers' IPs come from X-Forwarded-For
 * (TRUST_PROXY), one range of addresses per test.
 */
import { bootTenancy, type Tenancy, type Tenant } from "../helpers/tenants";
import { withStatusProbe } from "../helpers/status-probe";
import { errorBody } from "../helpers/auth";
import { Console } from "console";
import { execHere } from "../../runtime/repl";

const INVALID = errorBody(401, "username or password is invalid");
const ACCOUNT_LIMITED = errorBody(429, "too many failed login attempts for this account from this IP");
const IP_LIMITED = errorBody(429, "too many failed login attempts from this IP");

jest.setTimeout(240_000);

describe("", () => {
	let T: Tenancy;
	let net = 0;
	/** A fresh /24 for each test: failures of one test never reach another's counters. */
	const range = () => `198.51.${++net}`;

	beforeAll(async () => {
		T = await bootTenancy({ trustProxy: true });
	}, 240_000);
	afterAll(async () => {
		await T?.cleanup();
	});
	const from = (ip: string) => ({ "x-forwarded-for": ip });
	const login = (t: Tenant | "root", username: string, password: string, ip: string) =>
		T.p.http("POST", "/auth/token", { headers: from(ip), body: { grant_type: "password", client_id: t === "root" ? T.p.root.client_id : t.client.id, username, password } });
	const rootLogin = (ip: string) => login("root", T.p.root.username, T.p.root.password, ip);
	/** The blocks `token` may see (the listing's items), optionally filtered. */
	const blocks = async (token: string, query = "") => {
		const r = await T.as(token, "GET", `/auth/login-blocks${query}`);
		expect(r.status).toBe(200);
		return r.body as { items: Array<Record<string, any>>; total: number };
	};
	/** Ten wrong passwords for `user` of `t` from `ip`: each 401, the tenth blocks the account. */
	async function blockAccount(t: Tenant, username: string, ip: string) {
		for (let i = 0; i < 10; i++) expect((await login(t, username, `wrong-${i}`, ip)).body).toEqual(INVALID);
	}

	// The tests over HTTP hold /status under its bound; the console's (its commands run in this process) and the restart
	// (/status is down meanwhile) are outside the probe.
	describe("over HTTP", () => {
		withStatusProbe(() => T.p.url);

		test("ten wrong passwords for A's member block that account from that IP only: not A's other users, not B's member, not root", async () => {
			const ip = `${range()}.1`;
			await blockAccount(T.a, "member", ip);
			// The right password: 429 for that account from that IP.
			const blocked = await login(T.a, "member", T.a.member.password, ip);
			expect(blocked.status).toBe(429);
			expect(blocked.body).toEqual(ACCOUNT_LIMITED);
			expect(Number(blocked.headers.get("retry-after"))).toBeGreaterThan(14 * 60);
			// Everyone else from the same IP logs in: A's other users, B's user of the same name, the operator.
			expect((await login(T.a, T.a.admin.username, T.a.admin.password, ip)).status).toBe(200);
			expect((await login(T.a, "limited", T.a.limited.password, ip)).status).toBe(200);
			expect((await login(T.b, "member", T.b.member.password, ip)).status).toBe(200);
			expect((await rootLogin(ip)).status).toBe(200);
			// The same account from another IP logs in.
			expect((await login(T.a, "member", T.a.member.password, `${range()}.2`)).status).toBe(200);
		});

		test("an account is the user: failures by its username, email and phone add up; a login naming no user has its own", async () => {
			const ip = `${range()}.1`;
			const password = "Spelled-Three-Ways-1";
			const u = await T.as(T.a.admin.token, "POST", "/identity/users", { username: "spelled", email: "spelled@a.example", phone: "+15550100", password });
			expect(u.status).toBe(200);
			const spellings = ["spelled", "Spelled@A.example", " spelled@a.example", "+1 555 0100", "1-555-0100"];
			for (let i = 0; i < 10; i++) expect((await login(T.a, spellings[i % spellings.length], `wrong-${i}`, ip)).body).toEqual(INVALID);
			expect((await login(T.a, "spelled", password, ip)).body).toEqual(ACCOUNT_LIMITED);
			expect((await login(T.a, "+15550100", password, ip)).body).toEqual(ACCOUNT_LIMITED);
			// A user id typed as the login names no user (usernames are never 24-hex): its own counter, the member's untouched.
			for (let i = 0; i < 10; i++) expect((await login(T.a, T.a.member.id, `wrong-${i}`, ip)).body).toEqual(INVALID);
			expect((await login(T.a, "member", T.a.member.password, ip)).status).toBe(200);
			const listed = (await blocks(T.a.admin.token, `?ip=${ip}`)).items.map((b) => b.account).sort();
			expect(listed).toEqual(["login", "user"]);
		});

		test("the per-IP bound: 100 failures through A's client from one IP block A's logins there, never B's nor root's", async () => {
			const ip = `${range()}.1`;
			// 100 failures over 100 accounts (logins naming no user): no account reaches its own bound.
			for (let batch = 0; batch < 10; batch++) {
				const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => login(T.a, `nobody-${batch}-${i}`, "wrong-password", ip)));
				for (const r of answers) expect(r.body).toEqual(INVALID);
			}
			const refused = await login(T.a, T.a.admin.username, T.a.admin.password, ip);
			expect(refused.body).toEqual(IP_LIMITED);
			expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(14 * 60);
			expect(
				(await T.p.http("POST", "/auth/token", { headers: from(ip), body: { grant_type: "client_credential", client_id: T.a.client.id, client_secret: T.a.client.secret } })).body,
			).toEqual(IP_LIMITED);
			// Tenant B and the operator from the same IP; tenant A from another IP.
			expect((await login(T.b, T.b.admin.username, T.b.admin.password, ip)).status).toBe(200);
			expect((await rootLogin(ip)).status).toBe(200);
			expect((await login(T.a, T.a.admin.username, T.a.admin.password, `${range()}.2`)).status).toBe(200);
			// The operator sees the block, and no login that was typed (they are kept as keyed digests only).
			const seen = await blocks(T.root, `?client=${T.a.client.id}&ip=${ip}`);
			expect(seen.items).toEqual([expect.objectContaining({ id: `ip:${T.a.client.id}:${ip}`, counter: "ip", client: T.a.client.id, ip, failures: 100, limit: 100 })]);
			expect(JSON.stringify(await blocks(T.root))).not.toContain("nobody-");
			await T.as(T.root, "DELETE", `/auth/login-blocks/${encodeURIComponent(seen.items[0].id)}`);
		});

		test("a wrong client secret counts on the client's secret, not on its users", async () => {
			const ip = `${range()}.1`;
			const cc = (secret: string) =>
				T.p.http("POST", "/auth/token", { headers: from(ip), body: { grant_type: "client_credentials", client_id: T.b.client.id, client_secret: secret } });
			for (let i = 0; i < 10; i++) expect((await cc(`wrong-${i}`)).body).toEqual(errorBody(401, `client secret is invalid for client ${T.b.client.id}`));
			expect((await cc(T.b.client.secret)).body).toEqual(ACCOUNT_LIMITED);
			// B's users log in from that IP (no secret presented); A's client is untouched.
			expect((await login(T.b, "member", T.b.member.password, ip)).status).toBe(200);
			expect(
				(await T.p.http("POST", "/auth/token", { headers: from(ip), body: { grant_type: "client_credentials", client_id: T.a.client.id, client_secret: T.a.client.secret } }))
					.status,
			).toBe(200);
			const [block] = (await blocks(T.root, `?client=${T.b.client.id}&ip=${ip}`)).items;
			expect(block).toMatchObject({ id: `acct:${T.b.client.id}:secret:${ip}`, counter: "account", account: "secret", failures: 10, limit: 10 });
			expect((await T.as(T.root, "DELETE", `/auth/login-blocks/${block.id}`)).body).toEqual({ result: "OK" });
			expect((await cc(T.b.client.secret)).status).toBe(200);
		});

		test("the listing by route: the operator sees every tenant's blocks, a tenant admin its own only, a user without the grant none", async () => {
			const ip = `${range()}.1`;
			await blockAccount(T.a, "member", ip);
			await blockAccount(T.b, "member", ip);
			const aBlock = {
				id: `acct:${T.a.client.id}:user.${T.a.member.id}:${ip}`,
				counter: "account",
				client: T.a.client.id,
				account: "user",
				user: T.a.member.id,
				ip,
				failures: 10,
				limit: 10,
				until: expect.any(String),
			};
			const bBlock = { ...aBlock, id: `acct:${T.b.client.id}:user.${T.b.member.id}:${ip}`, client: T.b.client.id, user: T.b.member.id };
			expect(Date.parse(((await blocks(T.root, `?ip=${ip}`)).items[0] as { until: string }).until) - Date.now()).toBeGreaterThan(14 * 60_000);
			expect((await blocks(T.root, `?ip=${ip}`)).items.sort((x, y) => x.id.localeCompare(y.id))).toEqual([aBlock, bBlock].sort((x, y) => x.id.localeCompare(y.id)));
			expect(await blocks(T.a.admin.token, `?ip=${ip}`)).toEqual({ items: [aBlock], total: 1 });
			expect(await blocks(T.b.admin.token, `?ip=${ip}`)).toEqual({ items: [bBlock], total: 1 });
			expect(await blocks(T.b.admin.token, `?user=${T.a.member.id}`)).toEqual({ items: [], total: 0 });
			expect((await blocks(T.a.admin.token)).items.every((b) => b.client === T.a.client.id)).toBe(true);
			expect(await blocks(T.root, `?user=${T.a.member.id}&ip=${ip}`)).toEqual({ items: [aBlock], total: 1 });
			// Without the grant, without a token, with a bad filter.
			expect((await T.as(T.a.limited.token, "GET", "/auth/login-blocks")).body).toEqual(errorBody(403, "no grant for manage on identity:users"));
			expect((await T.as(T.b.limited.token, "DELETE", `/auth/login-blocks/${bBlock.id}`)).body).toEqual(errorBody(403, "no grant for manage on identity:users"));
			expect((await T.p.http("GET", "/auth/login-blocks")).status).toBe(401);
			expect((await T.as(T.root, "GET", "/auth/login-blocks?tenant=x")).body).toEqual(errorBody(400, "unknown query parameter tenant; accepted: token, client, user, ip"));
			expect((await T.as(T.root, "GET", "/auth/login-blocks?ip=")).body).toEqual(errorBody(400, "ip must be a string of 1 to 100 characters"));
			// A token narrowed below manage:identity:users is refused by scope first.
			const narrow = await T.p.http("POST", "/auth/token", {
				headers: from(`${range()}.9`),
				body: { grant_type: "password", client_id: T.a.client.id, username: T.a.admin.username, password: T.a.admin.password, scopes: ["read:identity:users"] },
			});
			expect((await T.as(narrow.body.data.access_token, "GET", "/auth/login-blocks")).body).toEqual(errorBody(403, "token scope does not cover manage:identity:users"));

			// Lifting: another tenant's block answers 404 (as none would) and stays; its own tenant's admin lifts it.
			expect((await T.as(T.a.admin.token, "DELETE", `/auth/login-blocks/${bBlock.id}`)).body).toEqual(errorBody(404, `login block ${bBlock.id} not found`));
			expect((await login(T.b, "member", T.b.member.password, ip)).body).toEqual(ACCOUNT_LIMITED);
			expect((await T.as(T.b.admin.token, "DELETE", `/auth/login-blocks/${bBlock.id}`)).body).toEqual({ result: "OK" });
			expect((await login(T.b, "member", T.b.member.password, ip)).status).toBe(200);
			// The operator lifts any tenant's; a second lift, or a malformed id, answers 404 / 400.
			expect((await T.as(T.root, "DELETE", `/auth/login-blocks/${encodeURIComponent(aBlock.id)}`)).body).toEqual({ result: "OK" });
			expect((await login(T.a, "member", T.a.member.password, ip)).status).toBe(200);
			expect((await T.as(T.root, "DELETE", `/auth/login-blocks/${aBlock.id}`)).body).toEqual(errorBody(404, `login block ${aBlock.id} not found`));
			expect((await T.as(T.root, "DELETE", "/auth/login-blocks/not-a-block")).body).toEqual(errorBody(400, "id is not a login block id: take one from GET /auth/login-blocks"));
			// A lifted account starts again from nothing: one failure does not block it.
			expect((await login(T.a, "member", "wrong", ip)).body).toEqual(INVALID);
			expect((await login(T.a, "member", T.a.member.password, ip)).status).toBe(200);
		});
	});

	test("the console lists and lifts blocks (login-blocks, login-unblock), as npm run repl -- --exec does", async () => {
		const ip = `${range()}.1`;
		await blockAccount(T.a, "member", ip);
		const id = `acct:${T.a.client.id}:user.${T.a.member.id}:${ip}`;
		// What the commands print goes through the process's streams, as in a platform (not through jest's console).
		const jestConsole = global.console;
		global.console = new Console(process.stdout, process.stderr);
		let outcomes;
		try {
			outcomes = await execHere(T.p.broker, [`login-blocks --ip ${ip}`, `login-unblock ${id}`, `login-blocks --client ${T.a.client.id} --ip ${ip}`]);
		} finally {
			global.console = jestConsole;
		}
		const [listed, lifted, again] = outcomes;
		expect(listed).toMatchObject({ ok: true, result: { items: [expect.objectContaining({ id, failures: 10 })], total: 1 } });
		expect(listed.output).toContain(">> 1 login block in force");
		expect(listed.output).toContain(`   ${id}  10/10 failures, until `);
		expect(lifted).toMatchObject({ ok: true, result: { result: "OK" } });
		expect(lifted.output).toContain(`>> Lifted ${id}`);
		expect(again).toMatchObject({ ok: true, result: { items: [], total: 0 } });
		expect((await login(T.a, "member", T.a.member.password, ip)).status).toBe(200);
		// An unknown block fails the command (a script's --exec exits non-zero).
		const [none] = await execHere(T.p.broker, [`login-unblock ${id}`]);
		expect(none).toMatchObject({ ok: false, error: `login block ${id} not found` });
	});

	test("a block survives a restart (the embedded cache keeps it in DATA_DIR/cache.json), and is listed after it", async () => {
		const ip = `${range()}.1`;
		await blockAccount(T.a, "member", ip);
		await T.p.restart();
		expect((await login(T.a, "member", T.a.member.password, ip)).body).toEqual(ACCOUNT_LIMITED);
		expect((await login(T.b, "member", T.b.member.password, ip)).status).toBe(200);
		const id = `acct:${T.a.client.id}:user.${T.a.member.id}:${ip}`;
		expect((await blocks(T.a.admin.token, `?ip=${ip}`)).items.map((b) => b.id)).toEqual([id]);
		expect((await T.as(T.a.admin.token, "DELETE", `/auth/login-blocks/${id}`)).body).toEqual({ result: "OK" });
		expect((await login(T.a, "member", T.a.member.password, ip)).status).toBe(200);
	});
});
