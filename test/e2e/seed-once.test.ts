/**
 * The first-start seed across auth replicas on one PostgreSQL (DOCUMENT_STORE=postgres, a database of its own):
 * two nodes hosting every service, started at the same moment with no transporter and no Redis (two separate
 * processes sharing only the database, the case a cache lock cannot cover), seed exactly one root client, one root
 * user and one set of root grants; only the seeding node writes bootstrap.json; both serve, and the root logs in
 * through either. A third node started later on a fresh DATA_DIR seeds nothing. Skips with a message when
 * PostgreSQL does not answer (fails under REQUIRE_SERVERS=1).
 */
import { existsSync, readFileSync } from "fs";
import path from "path";
import { Client } from "pg";
import { needServers } from "../helpers/platform";
import { client, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freePort } from "../helpers/ports";
import { testDatabase, type TestDatabase } from "../helpers/pg";

const servers = needServers(["PostgreSQL", 5432]);

jest.setTimeout(240_000);

let db: TestDatabase | undefined;
let pgc: Client | undefined;
const nodes: ChildNode[] = [];
const ports: number[] = [];
let shared: Record<string, string>;

async function start(name: string): Promise<ChildNode> {
	const port = await freePort();
	// Several nodes on one host: their per-service ops ports would collide, so they serve none.
	const n = startNode(name, { ...shared, PORT: String(port), SERVICE_PORTS: "0", LOG_LEVEL: "info" });
	nodes.push(n);
	ports.push(port);
	return n;
}

beforeAll(async () => {
	if (!servers.up) return;
	db = await testDatabase();
	if (!db) throw new Error("PostgreSQL answered the probe but no test database could be made");
	const d = testDeployment();
	shared = { JWT_SECRET: d.jwtSecret, AES_SECRET: d.aesSecret, DOCUMENT_STORE: "postgres", DATABASE_URL: db.url };
	pgc = new Client({ connectionString: db.url });
	await pgc.connect();
}, 60_000);

afterAll(async () => {
	await pgc?.end();
	await Promise.all(nodes.map((n) => stopNode(n)));
	await db?.drop();
});

async function seeded() {
	const q = async (sql: string) => (await pgc!.query(sql)).rows;
	return {
		clients: await q(`select id from "docs/domain/clients" where doc->>'name' = 'root' and doc->'operator' = 'true'::jsonb`),
		users: await q(`select id from "docs/identity/users" where doc->>'username' = 'root'`),
		subjects: await q(`select doc->>'subject' as subject, count(*)::int as n from "docs/auth/grants" group by 1`),
		// Read only when the claims table exists, so a build without claims fails on the counts above, not here.
		claim: (await q(`select to_regclass('"docs/_seed"') is not null as ok`))[0].ok ? (await q(`select doc from "docs/_seed" where id = 'root'`))[0]?.doc : undefined,
	};
}

servers.test("two auth nodes starting together on one database seed the root exactly once; both serve it", async () => {
	const [a, b] = await Promise.all([start("seed-a"), start("seed-b")]);
	await Promise.all([0, 1].map((i) => waitForHttp(`http://127.0.0.1:${ports[i]}/status`, [a, b], { timeoutMs: 180_000 })));

	const s = await seeded();
	expect(s.clients).toHaveLength(1);
	expect(s.users).toHaveLength(1);
	// Every grant is the root user's, written once (a second seed would double them or add a second subject).
	expect(s.subjects).toHaveLength(1);
	expect(s.subjects[0].subject).toBe(`${s.users[0].id}@root.local`);

	// Only the seeding node knows the generated secrets and writes them; the other says where they are.
	const files = [a, b].map((n) => path.join(n.dataDir, "bootstrap.json"));
	expect(files.map((f) => existsSync(f)).sort()).toEqual([false, true]);
	const w = files.findIndex((f) => existsSync(f));
	const [winner, other] = w === 0 ? [a, b] : [b, a];
	expect(s.claim).toMatchObject({ state: "done", by: expect.stringMatching(/^seed-[ab]-/) });
	expect(s.claim.by.startsWith(winner.name)).toBe(true);
	expect(other.output()).toContain(`Platform already seeded by ${s.claim.by}: the root credentials are in that node's DATA_DIR/bootstrap.json`);
	expect(other.output()).not.toContain("Platform seeded. Root credentials");

	const root = JSON.parse(readFileSync(files[w], "utf8"));
	expect(root).toMatchObject({ client_id: s.clients[0].id, user_id: s.users[0].id, username: "root", domain: "root.local" });
	for (const port of ports) {
		const http = client(`http://127.0.0.1:${port}`);
		expect((await http("GET", "/status")).status).toBe(200);
		const login = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
		expect([port, login.status]).toEqual([port, 200]);
		const me = await http("GET", "/auth/verify", { token: login.body.data.access_token });
		expect(me.status).toBe(200);
		expect(me.body.data).toMatchObject({ uid: root.user_id, cid: root.client_id });
	}
});

servers.test("a node started later on a fresh DATA_DIR finds the seed done and writes nothing", async () => {
	const before = await seeded();
	expect(before.users).toHaveLength(1);
	const c = await start("seed-c");
	await waitForHttp(`http://127.0.0.1:${ports[2]}/status`, [c], { timeoutMs: 180_000 });
	const after = await seeded();
	expect(after.clients).toEqual(before.clients);
	expect(after.users).toEqual(before.users);
	expect(after.subjects).toEqual(before.subjects);
	expect(existsSync(path.join(c.dataDir, "bootstrap.json"))).toBe(false);
	expect(c.output()).toContain(`Platform already seeded by ${before.claim.by}`);
});
