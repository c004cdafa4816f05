/**
 * Issue 33 item 7: docs/api.md's limits table says what the server answers. The table is read from the page; each
 * row's limit is passed for real on a running platform (RATE_LIMIT set, so that one too), and the answer's status and
 * message must be the row's, word for word (`<field>`, `<operator>`: the names the request used), with `Retry-After`
 * where the row names it. A row without a trigger here, or a trigger without its row, fails: the page and the server
 * cannot drift apart.
 */
import { readFileSync } from "fs";
import path from "path";
import { encryptEnvelope } from "../../lib/crypto";
import { totp } from "../../lib/totp";
import { platformDoc } from "../../engine/collection.mixin";
import { aesOf, createClient } from "../helpers/auth";
import { bootPlatform, type TestPlatform } from "../helpers/platform";

jest.setTimeout(240_000);

interface Row {
	limit: string;
	status: number;
	/** The message as the page writes it, placeholders included. */
	message: string;
	retryAfter: boolean;
}

/** The rows of the table under `## Limits` in docs/api.md. */
function limitsTable(): Row[] {
	const text = readFileSync(path.join(__dirname, "../../docs/api.md"), "utf8");
	const at = text.indexOf("\n## Limits\n");
	const section = text.slice(at, text.indexOf("\n## ", at + 5));
	const rows = section.split("\n").filter((l) => l.startsWith("| ") && !l.startsWith("| Limit |"));
	return rows.map((line) => {
		const cells = line.split(" | ").map((c) => c.replace(/^\| ?| ?\|$/g, "").trim());
		const m = /^(\d{3}) `([^`]+)`/.exec(cells[2] ?? "");
		if (!m) throw new Error(`docs/api.md, Limits: the row "${cells[0]}" names no status and message: ${line}`);
		return { limit: cells[0], status: Number(m[1]), message: m[2], retryAfter: cells[2].includes("`Retry-After`") };
	});
}

interface Answer {
	status: number;
	body: any;
	retryAfter: string | null;
	/** The names the request used, for the row's placeholders. */
	names?: Record<string, string>;
}

let p: TestPlatform;
let root: string;
const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));
const TOTP_HEX = "3132333435363738393031323334353637383930";

async function call(method: string, url: string, opts: { token?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
	const r = await p.http(method, url, { token: opts.token ?? root, body: opts.body, raw: opts.raw, headers: opts.headers });
	return { status: r.status, body: r.body, retryAfter: r.headers.get("retry-after") };
}
const login = (client: string, username: string, password: string) =>
	call("POST", "/auth/token", { token: "", body: { grant_type: "password", client_id: client, username, password } });
/** The last answer once `n` requests were made, `parallel` at a time. */
async function repeat(n: number, parallel: number, one: (i: number) => Promise<Answer>): Promise<Answer[]> {
	const out: Answer[] = [];
	for (let i = 0; i < n; i += parallel) out.push(...(await Promise.all(Array.from({ length: Math.min(parallel, n - i) }, (_, j) => one(i + j)))));
	return out;
}
const newClient = async (name: string) => createClient(p.http, root, { name, domains: [`${name}.limits.example`], scopes: ["read:content"] });

/** How each limit is passed: one request (or the one after a series) that must answer the row. */
const TRIGGERS: Record<string, () => Promise<Answer>> = {
	"request body": () => call("POST", "/content/notes", { raw: JSON.stringify({ title: "x".repeat(1024 * 1024) }) }),
	"token request form": () =>
		call("POST", "/auth/token", { token: "", raw: `grant_type=password&note=${"x".repeat(64 * 1024)}`, headers: { "content-type": "application/x-www-form-urlencoded" } }),
	"`bulk` create": () => call("POST", "/content/notes/bulk", { body: { items: Array.from({ length: 1001 }, (_, i) => ({ title: `n${i}` })) } }),
	"list `pagination.limit`": () => call("GET", `/content/notes?pagination=${q({ limit: 101 })}`),
	"array fields": async () => ({
		...(await call("POST", "/content/notes", { body: { title: "tagged", tags: Array.from({ length: 1001 }, (_, i) => `t${i}`) } })),
		names: { field: "tags" },
	}),
	"query depth": () => {
		let deep: Record<string, unknown> = { title: "x" };
		for (let i = 0; i < 8; i++) deep = { $and: [deep] };
		return call("GET", `/content/notes/count?query=${q(deep)}`);
	},
	"query conditions": () => call("GET", `/content/notes/count?query=${q(Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`props.k${i}`, i])))}`),
	"`$in` and `$nin` values": async () => ({
		...(await call("GET", `/content/notes/count?query=${q({ tags: { $nin: Array.from({ length: 501 }, (_, i) => i) } })}`)),
		names: { operator: "$nin" },
	}),
	"`$in` and `$nin` values in all": () =>
		call("GET", `/content/notes/count?query=${q({ $and: [0, 1, 2].map((k) => ({ [`props.k${k}`]: { $in: Array.from({ length: 400 }, (_, i) => i) } })) })}`),
	"`$regex`": () => call("GET", `/content/notes/count?query=${q({ title: { $regex: "a".repeat(257) } })}`),
	"documents examined one by one": async () => {
		// 10 001 notes the database cannot filter by a `\b` pattern: each would be matched in the gateway.
		const store = (p.broker.getLocalService("content") as any).collectionStore("notes");
		const docs = Array.from({ length: 10_001 }, (_, i) => platformDoc({ title: `examined ${i}` }, { owner: p.root.user_id, cid: p.root.client_id }));
		for (let i = 0; i < docs.length; i += 5000) await store.insertMany(docs.slice(i, i + 5000));
		return call("GET", `/content/notes/count?query=${q({ title: { $regex: "\\bexamined" } })}`);
	},
	"open cursors": async () => {
		// Live cursors stay open: 8 of them, then the ninth.
		const aborts = Array.from({ length: 8 }, () => new AbortController());
		try {
			for (const a of aborts) {
				const res = await fetch(`${p.url}/content/notes/cursor?live=true&query=${q({ title: "none" })}`, { headers: { authorization: `Bearer ${root}` }, signal: a.signal });
				if (res.status !== 200) throw new Error(`a cursor did not open: ${res.status}`);
			}
			return await call("GET", `/content/notes/cursor?query=${q({ title: "none" })}`);
		} finally {
			for (const a of aborts) a.abort();
		}
	},
	"failed logins, per account": async () => {
		const c = await newClient("per-account");
		await repeat(10, 5, () => login(c.id, "nobody-here", "wrong-password-1"));
		return login(c.id, "nobody-here", "wrong-password-1");
	},
	"failed logins, per client and IP": async () => {
		const c = await newClient("per-ip");
		// One failure each of 100 accounts (logins that name no user): no account reaches its own 10.
		await repeat(100, 10, (i) => login(c.id, `nobody-${i}`, "wrong-password-1"));
		return login(c.id, "nobody-else", "wrong-password-1");
	},
	"TOTP checks": async () => {
		const secret = encryptEnvelope(aesOf(p), TOTP_HEX);
		const valid = new Set(Array.from({ length: 11 }, (_, i) => totp(TOTP_HEX, Date.now() + (i - 5) * 30_000)));
		let n = 0;
		while (valid.has(String(n).padStart(6, "0"))) n++;
		const wrong = String(n).padStart(6, "0");
		const token = (await login(p.root.client_id, p.root.username, p.root.password)).body.data.access_token;
		await repeat(30, 10, () => call("POST", "/auth/check", { token, body: { secret, token: wrong } }));
		return call("POST", "/auth/check", { token, body: { secret, token: wrong } });
	},
	"rate limit": async () => {
		// A principal of its own (a client's token): its bucket holds the burst, then the rate.
		const c = await newClient("rated");
		const token = (await call("POST", "/auth/token", { token: "", body: { grant_type: "client_credential", client_id: c.id, client_secret: c.secret } })).body.data.access_token;
		const answers = await Promise.all(Array.from({ length: RATE.burst + 200 }, () => call("GET", "/auth/verify", { token })));
		return answers.find((a) => a.status !== 200) ?? answers[0];
	},
};

/** The rate limit this platform runs with: a burst the rest of the suite stays under. */
const RATE = { rate: 1, burst: 300 };

const rows = limitsTable();

beforeAll(async () => {
	p = await bootPlatform({ rateLimit: RATE });
	root = await p.rootToken();
});
afterAll(() => p?.cleanup());

test("every limit of the page has a trigger here, and every trigger its row", () => {
	expect(rows.length).toBeGreaterThanOrEqual(16);
	expect(rows.map((r) => r.limit).sort()).toEqual(Object.keys(TRIGGERS).sort());
});

test.each(rows.map((r) => [r.limit, r] as const))("%s: the server answers what the page says", async (_limit, row) => {
	const answer = await TRIGGERS[row.limit]();
	const store = (await p.http("GET", "/status")).body.info["document store"]?.kind;
	if (row.limit === "documents examined one by one" && store !== "postgres") {
		// The embedded store matches every filter in the gateway's process, without this bound (the text below the table).
		expect({ store, status: answer.status, total: answer.body.total }).toEqual({ store, status: 200, total: 10_001 });
		return;
	}
	const message = row.message.replace(/<(\w+)>/g, (whole, name) => answer.names?.[name] ?? whole);
	expect({ status: answer.status, body: answer.body }).toEqual({ status: row.status, body: { statusCode: row.status, message, error: expect.any(String) } });
	if (row.retryAfter) expect(Number(answer.retryAfter)).toBeGreaterThan(0);
});
