/**
 * Root seeding on the first start (docs/contracts.md "Start-up and the first credentials"), through HTTP: bootstrap.json
 * (mode 0600), values given by configuration or environment win on the first start only, the root password login
 * yields scope `whole`, and the root may do everything through the ordinary layers. One platform at a time.
 */
import { readFileSync, rmSync, statSync } from "fs";
import path from "path";
import { bootPlatform, tempDir, type TestPlatform } from "../helpers/platform";
import { LeakWatch, tokenOf } from "../helpers/auth";

const HEX24 = /^[0-9a-f]{24}$/;
const mode = (file: string) => statSync(file).mode & 0o777;

/** Captures what the platform prints while `fn` runs. */
async function printed<T>(fn: () => Promise<T>): Promise<{ value: T; out: string }> {
	let out = "";
	const spy = jest.spyOn(process.stdout, "write").mockImplementation((chunk: any) => {
		out += String(chunk);
		return true;
	});
	try {
		return { value: await fn(), out };
	} finally {
		spy.mockRestore();
	}
}

describe("values given on the first start", () => {
	const given = {
		rootClientId: "5f0c0ffee0000000000000aa",
		rootClientSecret: "Given-Client-Secret-0123456789",
		rootUsername: "admin",
		rootPassword: "Given-Root-Password-0123!",
		rootDomain: "corp.test",
	};
	let p: TestPlatform;
	let w: LeakWatch;
	let dataDir: string;
	let bootstrap: string;

	beforeAll(async () => {
		dataDir = tempDir();
		p = (await printed(() => bootPlatform({ dataDir, ...given }))).value;
		w = new LeakWatch(p);
		w.secret(given.rootPassword, "root password", true);
		w.secret(given.rootClientSecret, "root client secret", true);
		bootstrap = readFileSync(path.join(dataDir, "bootstrap.json"), "utf8");
	});
	afterAll(async () => {
		await p?.cleanup();
		rmSync(dataDir, { recursive: true, force: true });
	});

	test("bootstrap.json and keys.json are readable by the owner only (0600) and hold the given values", () => {
		expect(mode(path.join(dataDir, "bootstrap.json"))).toBe(0o600);
		expect(mode(path.join(dataDir, "keys.json"))).toBe(0o600);
		const b = JSON.parse(bootstrap);
		expect(b).toEqual({
			client_id: given.rootClientId,
			client_secret: given.rootClientSecret,
			domain: given.rootDomain,
			user_id: expect.stringMatching(HEX24),
			username: given.rootUsername,
			password: given.rootPassword,
		});
	});

	test("the given root password logs in with scope whole; the given client secret works", async () => {
		const d = await tokenOf(w.http, { grant_type: "password", client_id: given.rootClientId, username: "admin", password: given.rootPassword });
		expect(d.scope).toBe("whole");
		expect(d.domain).toBe("corp.test");
		expect(d.subject.split(" ").sort()).toEqual([`${p.root.user_id}@corp.test`, "admin@corp.test"].sort());
		const v = await w.http("GET", "/auth/verify", { token: d.access_token });
		expect(v.body.data).toMatchObject({ uid: p.root.user_id, cid: given.rootClientId, client_id: given.rootClientId, scope: "whole", domain: "corp.test" });
		const cc = await tokenOf(w.http, { grant_type: "client_credential", client_id: given.rootClientId, client_secret: given.rootClientSecret });
		expect(cc.scope).toBe("whole");
		// A default username or a generated password do not exist.
		expect((await w.http("POST", "/auth/token", { body: { grant_type: "password", client_id: given.rootClientId, username: "root", password: given.rootPassword } })).status).toBe(
			401,
		);
	});

	test("the root may do everything through the ordinary layers", async () => {
		const token = (await tokenOf(w.http, { grant_type: "password", client_id: given.rootClientId, username: "admin", password: given.rootPassword })).access_token;
		expect((await w.http("POST", "/content/notes", { token, body: { title: "root note" } })).status).toBe(200);
		expect((await w.http("POST", "/logistic/vehicles", { token, body: { name: "truck" } })).status).toBe(200);
		expect((await w.http("GET", "/identity/users", { token })).status).toBe(200);
		expect((await w.http("GET", "/auth/grants", { token })).body.total).toBeGreaterThan(10);
		const can = await w.http("POST", "/auth/can", { token, body: { action: "manage", object: "financial:wallets" } });
		expect(can.body).toEqual({ data: { granted: true } });
		// The seeded records, without their secrets.
		const client = await w.http("GET", `/domain/clients/${given.rootClientId}`, { token });
		expect(client.status).toBe(200);
		expect(client.body.data).toMatchObject({ id: given.rootClientId, scopes: ["whole"], domains: ["corp.test"], status: "ACTIVE" });
		expect(client.body.data).not.toHaveProperty("secret");
		const user = await w.http("GET", `/identity/users/${p.root.user_id}`, { token });
		expect(user.body.data).toMatchObject({ id: p.root.user_id, username: "admin", status: "ACTIVE" });
		expect(user.body.data).not.toHaveProperty("password");
	});

	test("a later start never re-seeds and never changes the values, whatever it is given", async () => {
		const grantsBefore = (await w.http("GET", "/auth/grants/count", { token: await p.rootToken() })).body.total;
		expect(w.leaks()).toEqual([]);
		await p.stop();
		const { value: again, out } = await printed(() =>
			bootPlatform({
				dataDir,
				rootClientId: "aaaaaaaaaaaaaaaaaaaaaaaa",
				rootClientSecret: "Other-Secret-xyz",
				rootUsername: "other",
				rootPassword: "Other-Password-xyz",
				rootDomain: "other.test",
			}),
		);
		p = again;
		w = new LeakWatch(p);
		w.secret(given.rootPassword, "root password", true);
		w.secret(given.rootClientSecret, "root client secret", true);
		expect(out).not.toContain("Platform seeded");
		expect(out).not.toContain(given.rootPassword);
		expect(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8")).toBe(bootstrap);
		expect(mode(path.join(dataDir, "bootstrap.json"))).toBe(0o600);
		expect((await w.http("POST", "/auth/token", { body: { grant_type: "password", client_id: given.rootClientId, username: "admin", password: given.rootPassword } })).status).toBe(
			200,
		);
		for (const body of [
			{ grant_type: "password", client_id: given.rootClientId, username: "admin", password: "Other-Password-xyz" },
			{ grant_type: "password", client_id: given.rootClientId, username: "other", password: "Other-Password-xyz" },
			{ grant_type: "password", client_id: "aaaaaaaaaaaaaaaaaaaaaaaa", username: "other", password: "Other-Password-xyz" },
			{ grant_type: "client_credential", client_id: given.rootClientId, client_secret: "Other-Secret-xyz" },
		]) {
			const r = await w.http("POST", "/auth/token", { body });
			expect(r.status).toBe(401);
		}
		const token = await p.rootToken();
		expect((await w.http("GET", "/domain/clients/count", { token })).body.total).toBe(1);
		expect((await w.http("GET", `/identity/users/count?query=${encodeURIComponent(JSON.stringify({ username: "other" }))}`, { token })).body.total).toBe(0);
		expect((await w.http("GET", "/auth/grants/count", { token })).body.total).toBe(grantsBefore);
		expect((await w.http("GET", "/auth/verify", { token })).body.data.domain).toBe("corp.test");
		expect(w.leaks()).toEqual([]);
	});
});

describe("generated values", () => {
	test("an empty store with nothing given: generated id, secret and password, printed once, in bootstrap.json", async () => {
		const { value: p, out } = await printed(() => bootPlatform());
		try {
			const b = JSON.parse(readFileSync(path.join(p.dataDir, "bootstrap.json"), "utf8"));
			expect(mode(path.join(p.dataDir, "bootstrap.json"))).toBe(0o600);
			expect(b.client_id).toMatch(HEX24);
			expect(b.user_id).toMatch(HEX24);
			expect(b.username).toBe("root");
			expect(b.domain).toBe("root.local");
			expect(b.password.length).toBeGreaterThanOrEqual(16);
			expect(b.client_secret.length).toBeGreaterThanOrEqual(16);
			expect(out).toContain("Platform seeded");
			expect(out).toContain(b.client_id);
			expect(out).toContain(b.password);
			const w = new LeakWatch(p);
			w.secret(b.password, "root password", true);
			w.secret(b.client_secret, "root client secret", true);
			const d = await tokenOf(w.http, { grant_type: "password", client_id: b.client_id, username: "root", password: b.password });
			expect(d.scope).toBe("whole");
			expect(d.domain).toBe("root.local");
			expect((await tokenOf(w.http, { grant_type: "client_credential", client_id: b.client_id, client_secret: b.client_secret })).scope).toBe("whole");
			expect(w.leaks()).toEqual([]);
		} finally {
			await p.cleanup();
		}
	});

	test("values from the environment win on the first start and are not printed", async () => {
		const env = {
			PLATFORM_ROOT_CLIENT_ID: "00000000000000000000beef",
			PLATFORM_ROOT_CLIENT_SECRET: "Env-Client-Secret-0123456789",
			PLATFORM_ROOT_USERNAME: "envroot",
			PLATFORM_ROOT_PASSWORD: "Env-Root-Password-0123!",
			PLATFORM_ROOT_DOMAIN: "env.test",
		};
		const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
		Object.assign(process.env, env);
		let p: TestPlatform | undefined;
		try {
			const r = await printed(() => bootPlatform());
			p = r.value;
			expect(r.out).toContain("Platform seeded");
			expect(r.out).not.toContain(env.PLATFORM_ROOT_PASSWORD);
			expect(r.out).not.toContain(env.PLATFORM_ROOT_CLIENT_SECRET);
			expect(p.root).toMatchObject({
				client_id: env.PLATFORM_ROOT_CLIENT_ID,
				username: "envroot",
				domain: "env.test",
				password: env.PLATFORM_ROOT_PASSWORD,
				client_secret: env.PLATFORM_ROOT_CLIENT_SECRET,
			});
			const w = new LeakWatch(p);
			w.secret(env.PLATFORM_ROOT_PASSWORD, "root password", true);
			w.secret(env.PLATFORM_ROOT_CLIENT_SECRET, "root client secret", true);
			const d = await tokenOf(w.http, { grant_type: "password", client_id: env.PLATFORM_ROOT_CLIENT_ID, username: "envroot", password: env.PLATFORM_ROOT_PASSWORD });
			expect(d).toMatchObject({ scope: "whole", domain: "env.test" });
			expect(w.leaks()).toEqual([]);
		} finally {
			for (const [k, v] of Object.entries(saved)) {
				if (v === undefined) delete process.env[k];
				else process.env[k] = v;
			}
			await p?.cleanup();
		}
	});
});
