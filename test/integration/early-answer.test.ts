/**
 * Answers given before the request's body was read to its end (services/api/early-answer.ts), on both stores, over a
 * raw socket:
 *
 * - a client that reads only once it has sent its whole body gets the answer with its error body, not EPIPE or a
 *   reset: an upload over the 8 MiB file limit (413, was EPIPE after 8.7 MiB), one without a token (401), a JSON body
 *   over 1 MiB (413);
 * - a body far larger than that is not read for ever: declared 200 MiB (upload, JSON, no token) or chunked without
 *   end, it is answered at once, and the connection is cut after at most 16 MiB more (the JSON parser read all 200 MiB
 *   before answering, and an upload without a token was read to its end); a client that stops sending is cut off
 *   after 5 s without a byte.
 */
import net from "net";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { sleep } from "../helpers/wait";

const MiB = 1024 * 1024;

interface Sent {
	/** Body bytes the client wrote before it stopped (all of them, or up to the write that failed). */
	written: number;
	/** The code of the write or read that failed (EPIPE, ECONNRESET), if one did. */
	error?: string;
	status: number;
	body: any;
	/** When the server closed the connection, from the first body byte (ms; -1: it did not). */
	closedMs: number;
}

interface SendOpts {
	/** The body's first and last bytes (the rest is filler). */
	first?: Buffer;
	last?: Buffer;
	/** Pieces of `piece` bytes, `delayMs` apart. */
	piece?: number;
	delayMs?: number;
	/** Read the answer as it comes (else only once every byte is sent, or a write failed). */
	readWhileSending?: boolean;
	/** Frame the pieces as chunked transfer coding (the head must say so). */
	chunked?: boolean;
	/** After the last piece: wait this long for the server to close before giving up (ms). */
	timeoutMs?: number;
}

/** Sends `head`, then `total` bytes of body as told; then reads the answer until the server closes or `timeoutMs`. */
function send(port: number, head: string, total: number, opts: SendOpts = {}): Promise<Sent> {
	const { first = Buffer.alloc(0), last = Buffer.alloc(0), piece = 256 * 1024, delayMs = 0, readWhileSending = false, chunked = false, timeoutMs = 30_000 } = opts;
	return new Promise((resolve) => {
		const s = net.connect({ host: "127.0.0.1", port });
		if (!readWhileSending) s.pause();
		const got: Buffer[] = [];
		let written = 0;
		let error: string | undefined;
		let start = 0;
		let closedMs = -1;
		let done = false;
		let timer: NodeJS.Timeout | undefined;
		const finish = () => {
			if (done) return;
			done = true;
			clearTimeout(timer);
			s.destroy();
			const text = Buffer.concat(got).toString("utf8");
			const i = text.indexOf("\r\n\r\n");
			let body: any = i < 0 ? "" : text.slice(i + 4);
			try {
				body = JSON.parse(body);
			} catch {
				/* not JSON */
			}
			resolve({ written, error, status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), body, closedMs });
		};
		s.on("data", (c) => got.push(c));
		s.on("error", (e: NodeJS.ErrnoException) => void (error ??= e.code));
		s.on("end", () => void (closedMs = performance.now() - start));
		s.on("close", () => {
			if (closedMs < 0) closedMs = performance.now() - start;
			finish();
		});
		void (async () => {
			s.write(head);
			start = performance.now();
			const filler = Buffer.alloc(piece, 0x61);
			for (let sent = 0; sent < total && !error && !s.destroyed;) {
				const n = Math.min(piece, total - sent);
				const part = sent === 0 && first.length ? first : total - sent <= last.length ? last : filler.subarray(0, Math.min(n, total - sent - last.length));
				const ok = s.write(chunked ? Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from("\r\n")]) : part);
				sent += part.length;
				written = sent;
				if (!ok) await new Promise((r) => (s.once("drain", r), s.once("close", r)));
				if (delayMs) await sleep(delayMs);
			}
			s.resume();
			timer = setTimeout(finish, timeoutMs);
		})();
	});
}

const multipart = (boundary: string) => ({
	first: Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`),
	last: Buffer.from(`\r\n--${boundary}--\r\n`),
});
const TOO_LARGE_FILE = { statusCode: 413, message: "file is larger than 8388608 bytes", error: "Payload Too Large" };
const TOO_LARGE_BODY = { statusCode: 413, message: "body must not be larger than 1 MiB", error: "Payload Too Large" };
const NO_TOKEN = { statusCode: 401, message: "authorization token is required", error: "Unauthorized" };

describe("answers before the body's end", () => {
	let p: TestPlatform;
	let root: string;
	let port: number;
	beforeAll(async () => {
		p = await bootPlatform({});
		root = await p.rootToken();
		port = Number(new URL(p.url).port);
	}, 120_000);
	afterAll(() => p?.cleanup());

	const head = (path: string, headers: Record<string, string | number | undefined>) =>
		[`POST ${path} HTTP/1.1`, `Host: 127.0.0.1:${port}`, ...Object.entries(headers).flatMap(([k, v]) => (v === undefined ? [] : [`${k}: ${v}`])), "", ""].join("\r\n");
	const upload = (token: string | undefined, length: number | undefined, boundary = "xyz") =>
		head("/special/files/upload", {
			authorization: token && `Bearer ${token}`,
			"content-type": `multipart/form-data; boundary=${boundary}`,
			"content-length": length,
			"transfer-encoding": length === undefined ? "chunked" : undefined,
		});
	const json = (length: number | undefined) =>
		head("/content/notes", {
			authorization: `Bearer ${root}`,
			"content-type": "application/json",
			"content-length": length,
			"transfer-encoding": length === undefined ? "chunked" : undefined,
		});
	const jsonParts = { first: Buffer.from('{"title":"'), last: Buffer.from('"}') };

	test.each([
		["an upload of a 12 MiB file", () => upload(root, 12 * MiB), { ...multipart("xyz") }, TOO_LARGE_FILE],
		["an upload of 12 MiB without a token", () => upload(undefined, 12 * MiB), { ...multipart("xyz") }, NO_TOKEN],
		["a 12 MiB JSON body", () => json(12 * MiB), jsonParts, TOO_LARGE_BODY],
	] as const)(
		"%s, sent in 48 pieces 20 ms apart by a client that reads once it has sent: the answer and its body",
		async (_what, h, parts, answer) => {
			const r = await send(port, h(), 12 * MiB, { ...parts, delayMs: 20 });
			expect({ written: r.written, error: r.error, status: r.status, body: r.body }).toEqual({ written: 12 * MiB, error: undefined, status: answer.statusCode, body: answer });
		},
		60_000,
	);

	test.each([
		["an upload declared 200 MiB", () => upload(root, 200 * MiB), TOO_LARGE_FILE],
		["an upload without a token declared 200 MiB", () => upload(undefined, 200 * MiB), NO_TOKEN],
		["a JSON body declared 200 MiB", () => json(200 * MiB), TOO_LARGE_BODY],
		["a chunked JSON body of 200 MiB", () => json(undefined), TOO_LARGE_BODY],
	] as const)(
		"%s, sent as fast as it goes: answered, the connection cut after at most 16 MiB more",
		async (what, h, answer) => {
			const r = await send(port, h(), 200 * MiB, { readWhileSending: true, chunked: what.includes("chunked"), ...(what.includes("JSON") ? jsonParts : {}) });
			expect({ status: r.status, body: r.body }).toEqual({ status: answer.statusCode, body: answer });
			// 16 MiB dropped, plus what the two sockets' buffers hold.
			expect({ written: r.written < 40 * MiB, closed: r.closedMs >= 0 }).toEqual({ written: true, closed: true });
		},
		60_000,
	);

	test("a client that declares 200 MiB, sends 1 MiB and then nothing: answered, cut off 5 s after its last byte", async () => {
		const r = await send(port, json(200 * MiB), 1 * MiB, { ...jsonParts, readWhileSending: true, timeoutMs: 15_000 });
		expect({ status: r.status, body: r.body }).toEqual({ status: 413, body: TOO_LARGE_BODY });
		expect(r.closedMs).toBeGreaterThanOrEqual(4_900);
		expect(r.closedMs).toBeLessThan(9_000);
	}, 60_000);
});
