/**
 * HTTP/1.1 over a raw socket to 127.0.0.1, for the transport tests: bodies that lie about their length, stop half way,
 * arrive slowly, or a connection cut mid-body — what fetch and http.request will not send.
 */
import net from "net";
import { sleep } from "./wait";

export interface RawAnswer {
	/** 0 when the connection closed (or the wait ended) without a status line. */
	status: number;
	/** The body parsed as JSON when it is JSON, else its text. */
	body: any;
}

export interface RawSend {
	/** Pieces of the body, written one after another (`delayMs` apart). */
	chunks?: Array<Buffer | string>;
	delayMs?: number;
	/** After the last piece: `end` half-closes the socket, `destroy` cuts the connection (no answer awaited). */
	after?: "wait" | "end" | "destroy";
	/** How long to wait for the answer. */
	timeoutMs?: number;
}

/** The request head of `method path` with the given headers (Host and Connection: close added). */
export function head(port: number, method: string, path: string, headers: Record<string, string | number | undefined>): string {
	const lines = [`${method} ${path} HTTP/1.1`, `Host: 127.0.0.1:${port}`];
	for (const [k, v] of Object.entries(headers)) if (v !== undefined) lines.push(`${k}: ${v}`);
	return `${lines.join("\r\n")}\r\nConnection: close\r\n\r\n`;
}

function parse(raw: Buffer): RawAnswer {
	const text = raw.toString("utf8");
	const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
	const i = text.indexOf("\r\n\r\n");
	let body: any = i === -1 ? "" : text.slice(i + 4);
	try {
		body = JSON.parse(body);
	} catch {
		/* not JSON */
	}
	return { status: m ? Number(m[1]) : 0, body };
}

/** Sends the head, then the body pieces as told; resolves with the answer (or status 0). */
export function rawRequest(port: number, requestHead: string, send: RawSend = {}): Promise<RawAnswer> {
	const { chunks = [], delayMs = 0, after = "wait", timeoutMs = 10_000 } = send;
	return new Promise((resolve) => {
		const s = net.connect({ host: "127.0.0.1", port });
		const got: Buffer[] = [];
		let settled = false;
		const finish = () => {
			if (settled) return;
			settled = true;
			clearTimeout(timer);
			s.destroy();
			resolve(parse(Buffer.concat(got)));
		};
		const timer = setTimeout(finish, timeoutMs);
		s.on("data", (c) => {
			got.push(c);
			// One whole answer is enough (its Content-Length reached).
			const a = Buffer.concat(got);
			const i = a.indexOf("\r\n\r\n");
			const len = /\r\ncontent-length: *(\d+)/i.exec(a.subarray(0, i === -1 ? a.length : i).toString("latin1"));
			if (i !== -1 && len && a.length - i - 4 >= Number(len[1])) finish();
		});
		s.on("error", finish);
		s.on("close", finish);
		void (async () => {
			s.write(requestHead);
			for (const c of chunks) {
				if (delayMs) await sleep(delayMs);
				if (settled) return;
				s.write(c);
			}
			if (after === "end") s.end();
			else if (after === "destroy") {
				// Let the pieces leave before the cut, so the server has started on the body.
				await sleep(50);
				finish();
			}
		})();
	});
}
