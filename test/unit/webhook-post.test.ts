import http from "http";
import type { AddressInfo } from "net";
import { resolveTarget } from "../../runtime/address-guard";
import { Poster } from "../../workers/dispatcher/post";
import { storableUrl } from "../../workers/dispatcher/store";
import { verify, webhookHeaders } from "../../workers/dispatcher/signature";

interface Got {
	method?: string;
	url?: string;
	rawHeaders: string[];
	body: Buffer;
}

/** A local receiver recording each request's line, raw headers and bytes; `answer` picks the status. */
async function receiver(answer: (req: http.IncomingMessage) => number = () => 204) {
	const got: Got[] = [];
	const server = http.createServer((req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			got.push({ method: req.method, url: req.url, rawHeaders: req.rawHeaders, body: Buffer.concat(chunks) });
			const status = answer(req);
			if (status === 302) res.writeHead(302, { location: "/elsewhere" }).end("moved");
			else if (status > 0) res.writeHead(status).end("some answer body");
		});
	});
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
	return { port: (server.address() as AddressInfo).port, got, close: () => new Promise((r) => server.close(r)) };
}

const headerPairs = (raw: string[]) => Array.from({ length: raw.length / 2 }, (_, i) => [raw[2 * i].toLowerCase(), raw[2 * i + 1]]);

describe("Poster", () => {
	const poster = new Poster(1500);
	afterAll(() => poster.close());

	test("posts the exact bytes with their length, the given headers in order, Host with the port, path and query", async () => {
		const rx = await receiver();
		try {
			const target = await resolveTarget(`http://127.0.0.1:${rx.port}/in/hook?x=1&y=%C3%A9`, true);
			const text = JSON.stringify({ title: "naïve 東京 \ud800", n: 1 });
			const bytes = Buffer.from(text);
			const headers = webhookHeaders({ id: "msg_a", body: bytes, authorization: "Bearer t", secret: "s", now: 1_700_000_000_000 });
			for (const body of [bytes, text]) {
				const res = await poster.post(target, headers, body);
				expect(res).toMatchObject({ status: 204, error: null });
				expect(res.durationMs).toBeGreaterThanOrEqual(0);
			}
			expect(rx.got).toHaveLength(2);
			for (const g of rx.got) {
				expect(g.method).toBe("POST");
				expect(g.url).toBe("/in/hook?x=1&y=%C3%A9");
				expect(g.body.equals(bytes)).toBe(true);
				const pairs = headerPairs(g.rawHeaders);
				expect(pairs.map(([k]) => k)).toEqual([
					"content-type",
					"user-agent",
					"webhook-id",
					"webhook-timestamp",
					"authorization",
					"webhook-signature",
					"content-length",
					"host",
					"connection",
				]);
				const h = Object.fromEntries(pairs);
				expect(h["content-length"]).toBe(String(bytes.length));
				expect(h.host).toBe(`127.0.0.1:${rx.port}`);
				expect(h.connection).toBe("keep-alive");
				expect(h.authorization).toBe("Bearer t");
				expect(verify("s", "msg_a", 1700000000, g.body, h["webhook-signature"])).toBe(true);
			}
		} finally {
			await rx.close();
		}
	});

	test("the status decides: a 3xx is not followed, an error answer is its status", async () => {
		let n = 0;
		const rx = await receiver(() => [302, 500, 410][n++]);
		try {
			const target = await resolveTarget(`http://127.0.0.1:${rx.port}/hook`, true);
			const headers = webhookHeaders({ id: "msg_b", body: "{}" });
			expect((await poster.post(target, headers, "{}")).status).toBe(302);
			expect((await poster.post(target, headers, "{}")).status).toBe(500);
			expect((await poster.post(target, headers, "{}")).status).toBe(410);
			expect(rx.got.map((g) => g.url)).toEqual(["/hook", "/hook", "/hook"]);
		} finally {
			await rx.close();
		}
	});

	test("a receiver that never answers times out; an abort is not an attempt; a refused connection is an error", async () => {
		const rx = await receiver(() => 0);
		try {
			const target = await resolveTarget(`http://127.0.0.1:${rx.port}/slow`, true);
			const timedOut = await poster.post(target, {}, "{}");
			expect(timedOut).toMatchObject({ status: null, error: expect.stringContaining("timed out after 1500 ms") });
			const ac = new AbortController();
			const p = poster.post(target, {}, "{}", ac.signal);
			setTimeout(() => ac.abort(), 50);
			expect(await p).toMatchObject({ status: null, error: "aborted", aborted: true });
		} finally {
			await rx.close();
		}
		const gone = await resolveTarget(`http://127.0.0.1:${rx.port}/hook`, true);
		expect(await poster.post(gone, {}, "{}")).toMatchObject({ status: null, error: expect.stringMatching(/^ECONNREFUSED/) });
	});
});

describe("storableUrl, kept per URL", () => {
	test("the same answer on every call, credentials always stripped", () => {
		for (let i = 0; i < 3; i++) {
			expect(storableUrl("https://u:pw@hooks.example.com:8443/in?x=1")).toBe("https://hooks.example.com:8443/in?x=1");
			expect(storableUrl("https://hooks.example.com/in")).toBe("https://hooks.example.com/in");
			expect(storableUrl("http://u:p@[bad")).toBe("http://[bad");
		}
	});
});
