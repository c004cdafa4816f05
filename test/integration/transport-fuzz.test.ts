/**
 * Transport fuzz: the platform as `npm start` runs it (a child process), and every kind of route that reads a body —
 * JSON collection routes, the token endpoint (JSON and form), the multipart upload, special actions — sent bodies
 * that are truncated, that carry a bad multipart boundary, that are cut mid-way by the client, and that arrive slowly,
 * over raw sockets. Whenever an answer is possible the sender gets a 4xx in the spec's error shape; the process
 * stays up (its /status answers after each round, it never exits). A part stream left without an error listener
 * would end the process at the first cut or truncated upload: the process staying up is the observable proof.
 */
import { existsSync, readFileSync, rmSync } from "fs";
import path from "path";
import { startChild, type Child } from "../helpers/child";
import { tempDir } from "../helpers/platform";
import { pgTemplate, seedEmbeddedPg } from "../helpers/pg-template";
import { head, rawRequest, type RawAnswer } from "../helpers/raw-http";
import { sleep, waitForValue } from "../helpers/wait";
import { withStatusProbe } from "../helpers/status-probe";

jest.setTimeout(90_000);

let child: Child;
let dataDir: string;
let port = 0;
let token = "";
let invoice = "";

const bad = (status: number, message: string | RegExp = /./) => ({
	status,
	body: { statusCode: status, message: typeof message === "string" ? message : expect.stringMatching(message), error: expect.any(String) },
});

beforeAll(async () => {
	dataDir = tempDir("transport-fuzz-");
	if (await pgTemplate()) seedEmbeddedPg(dataDir, process.env.DATABASE_URL);
	child = await startChild({ DATA_DIR: dataDir });
	port = Number(new URL(child.url).port);
	// /status answers from the start; the first-start seed (bootstrap.json, the root login) comes a little later.
	token = await waitForValue(
		"the root login",
		async () => {
			if (!existsSync(path.join(dataDir, "bootstrap.json"))) return undefined;
			const root = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
			const login = await fetch(`${child.url}/auth/token`, {
				method: "POST",
				headers: { "content-type": "application/json" },
				body: JSON.stringify({ grant_type: "password", client_id: root.client_id, username: root.username, password: root.password }),
			});
			return login.status === 200 ? (((await login.json()) as any).data.access_token as string) : undefined;
		},
		60_000,
	);
	const inv = await fetch(`${child.url}/financial/invoices`, {
		method: "POST",
		headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
		body: JSON.stringify({ amount: 5, status: "ISSUED" }),
	});
	invoice = ((await inv.json()) as any).data.id;
}, 90_000);

afterAll(async () => {
	await child?.stop();
	if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});
withStatusProbe(() => ({ url: child.url, pid: child.proc.pid }), { inProcess: false });

/** The process is alive and serving, a moment after the round (an unheard stream error ends it within ticks). */
async function stillUp(): Promise<void> {
	await sleep(300);
	expect(child.proc.exitCode).toBeNull();
	expect((await fetch(`${child.url}/status`)).status).toBeLessThan(600);
}

const JSON_ROUTES = () => [
	{ kind: "collection", path: "/content/notes", auth: true },
	{ kind: "token", path: "/auth/token", auth: false },
	{ kind: "special", path: "/special/stats/collect", auth: true },
	{ kind: "special by id", path: `/financial/invoices/${invoice}/payment?zone=client`, auth: true },
];

function post(path: string, headers: Record<string, string | number | undefined>, auth = true): string {
	return head(port, "POST", path, { ...(auth ? { Authorization: `Bearer ${token}` } : {}), ...headers });
}

const FILE_HEAD = (b: string) => `--${b}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\n`;
const upload = (headers: Record<string, string | number | undefined>) => post("/special/files/upload", headers);
const multipart = (b: string) => `multipart/form-data; boundary=${b}`;

describe("truncated bodies: a clear 400", () => {
	test("JSON routes: a body that stops inside the JSON", async () => {
		for (const r of JSON_ROUTES()) {
			const body = `{"title": "ab`;
			const got = await rawRequest(port, post(r.path, { "Content-Type": "application/json", "Content-Length": body.length }, r.auth), { chunks: [body] });
			expect({ route: r.kind, ...got }).toEqual({ route: r.kind, ...bad(400, "body must be valid JSON") });
		}
		// The token endpoint's form body.
		const form = "grant_type=password&client_id=%E0";
		const got = await rawRequest(port, post("/auth/token", { "Content-Type": "application/x-www-form-urlencoded", "Content-Length": form.length }, false), { chunks: [form] });
		expect(got).toEqual(bad(400, "username is required"));
		await stillUp();
	});

	test("multipart: a body that ends inside a file part, inside part headers, before the closing boundary", async () => {
		const cases: Array<[string, RawAnswer | ReturnType<typeof bad>]> = [
			[`${FILE_HEAD("b")}abc`, bad(400, "body is not valid multipart/form-data: Unexpected end of form")],
			[`--b\r\nContent-Disposition: form-da`, bad(400, /^body is not valid multipart\/form-data: /)],
			[`${FILE_HEAD("b")}abc\r\n--b`, bad(400, /^body is not valid multipart\/form-data: /)],
			[`--b`, bad(400, /^body is not valid multipart\/form-data: /)],
		];
		for (const [body, want] of cases) {
			const got = await rawRequest(port, upload({ "Content-Type": multipart("b"), "Content-Length": Buffer.byteLength(body) }), { chunks: [body] });
			expect({ body, got }).toEqual({ body, got: want });
		}
		await stillUp();
	});

	test("a body shorter than its Content-Length, then the client half-closes: 400 in the spec's shape", async () => {
		const routes = [
			...JSON_ROUTES().map((r) => ({ path: r.path, type: "application/json", body: `{"a":1`, auth: r.auth })),
			{ path: "/special/files/upload", type: multipart("b"), body: `${FILE_HEAD("b")}abc`, auth: true },
		];
		for (const r of routes) {
			const got = await rawRequest(port, post(r.path, { "Content-Type": r.type, "Content-Length": 10_000 }, r.auth), { chunks: [r.body], after: "end", timeoutMs: 5000 });
			expect({ path: r.path, got }).toEqual({ path: r.path, got: bad(400, "the request ended before its body was complete") });
		}
		await stillUp();
	});
});

describe("bad boundaries: a clear 400", () => {
	test("missing, empty, other than the body's, over long", async () => {
		const body = `${FILE_HEAD("real")}hello\r\n--real--\r\n`;
		const cases: Array<[string, ReturnType<typeof bad>]> = [
			["multipart/form-data", bad(400, /^body is not valid multipart\/form-data: /)],
			["multipart/form-data; boundary=", bad(400, /^body is not valid multipart\/form-data: /)],
			[multipart("other"), bad(400, "body is not valid multipart/form-data: Unexpected end of form")],
			[multipart("x".repeat(200)), bad(400, "body is not valid multipart/form-data: Unexpected end of form")],
			[`multipart/form-data; boundary="unterminated`, bad(400, /^body is not valid multipart\/form-data: /)],
		];
		for (const [type, want] of cases) {
			const got = await rawRequest(port, upload({ "Content-Type": type, "Content-Length": Buffer.byteLength(body) }), { chunks: [body] });
			expect({ type, got }).toEqual({ type, got: want });
		}
		// A multipart body on a JSON route is refused as an unsupported media type (the token route also reads forms).
		for (const r of JSON_ROUTES()) {
			const got = await rawRequest(port, post(r.path, { "Content-Type": multipart("real"), "Content-Length": Buffer.byteLength(body) }, r.auth), { chunks: [body] });
			expect({ path: r.path, got }).toEqual({
				path: r.path,
				got: bad(
					415,
					r.path === "/auth/token"
						? "this endpoint reads a JSON or form body: send Content-Type: application/json or application/x-www-form-urlencoded, not multipart/form-data"
						: "this endpoint reads a JSON body: send Content-Type: application/json, not multipart/form-data",
				),
			});
		}
		await stillUp();
	});

	test("a malformed chunked body: 400 in the spec's shape", async () => {
		const got = await rawRequest(
			port,
			head(port, "POST", "/content/notes", { Authorization: `Bearer ${token}`, "Content-Type": "application/json", "Transfer-Encoding": "chunked" }),
			{
				chunks: ["zz\r\n{}\r\n0\r\n\r\n"],
			},
		);
		expect(got).toEqual(bad(400, "malformed HTTP request"));
		await stillUp();
	});
});

describe("connections cut mid-body: the process stays up", () => {
	test("every route, cut after part of the body (uploads: during the authority check and while storing)", async () => {
		const cuts: Array<Promise<RawAnswer>> = [];
		for (const r of JSON_ROUTES())
			cuts.push(rawRequest(port, post(r.path, { "Content-Type": "application/json", "Content-Length": 1000 }, r.auth), { chunks: [`{"title":"`], after: "destroy" }));
		for (let i = 0; i < 6; i++) {
			// The head and the first bytes of the file at once: the cut lands before the part is handed to the special
			// domain (the authority check is awaited first) or while it is being stored.
			cuts.push(
				rawRequest(port, upload({ "Content-Type": multipart("b"), "Content-Length": 1_000_000 }), { chunks: [`${FILE_HEAD("b")}${"x".repeat(i * 20_000)}`], after: "destroy" }),
			);
		}
		const answers = await Promise.all(cuts);
		for (const a of answers) expect(a.status === 0 || (a.status >= 400 && a.status < 500)).toBe(true);
		await stillUp();
		// Still serving uploads.
		const body = `${FILE_HEAD("b")}hello\r\n--b--\r\n`;
		const ok = await rawRequest(port, upload({ "Content-Type": multipart("b"), "Content-Length": Buffer.byteLength(body) }), { chunks: [body] });
		expect(ok.status).toBe(200);
	});
});

describe("slow bodies (bounded): answered as fast ones", () => {
	test("a JSON body and a multipart body sent in pieces 150 ms apart", async () => {
		const json = `{"title":"slow note"}`;
		const pieces = (s: string, n: number) => Array.from({ length: n }, (_, i) => s.slice(Math.floor((i * s.length) / n), Math.floor(((i + 1) * s.length) / n)));
		const note = await rawRequest(port, post("/content/notes", { "Content-Type": "application/json", "Content-Length": json.length }), { chunks: pieces(json, 6), delayMs: 150 });
		expect(note.status).toBe(200);
		expect(note.body.data).toMatchObject({ title: "slow note" });
		const body = `${FILE_HEAD("b")}${"s".repeat(3000)}\r\n--b--\r\n`;
		const up = await rawRequest(port, upload({ "Content-Type": multipart("b"), "Content-Length": Buffer.byteLength(body) }), { chunks: pieces(body, 8), delayMs: 150 });
		expect(up.status).toBe(200);
		expect(up.body).toMatchObject({ items: [{ size: 3000 }], total: 1 });
		// A slow truncated upload: still the clear 400.
		const cut = `${FILE_HEAD("b")}abc`;
		const slowCut = await rawRequest(port, upload({ "Content-Type": multipart("b"), "Content-Length": Buffer.byteLength(cut) }), { chunks: pieces(cut, 4), delayMs: 150 });
		expect(slowCut).toEqual(bad(400, "body is not valid multipart/form-data: Unexpected end of form"));
		await stillUp();
	});
});
