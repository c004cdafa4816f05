/** Multipart uploads for the files tests and the bench: small ones through fetch/FormData, large ones streamed. */
import http from "http";

export interface UploadResult {
	status: number;
	body: any;
	headers: http.IncomingHttpHeaders;
}

/** A response read to its end: status, headers and its body (parsed when it is JSON, else its text). */
export function answerOf(res: http.IncomingMessage): Promise<UploadResult & { text: string }> {
	return new Promise((resolve, reject) => {
		const chunks: Buffer[] = [];
		res.on("data", (c) => chunks.push(c));
		res.on("end", () => {
			const text = Buffer.concat(chunks).toString("utf8");
			let body: any = text;
			try {
				body = JSON.parse(text);
			} catch {
				/* not JSON */
			}
			resolve({ status: res.statusCode ?? 0, body, text, headers: res.headers });
		});
		res.on("error", reject);
	});
}

/** A multipart POST of `url` under `boundary`, its body left to the caller to write. */
export function postMultipart(
	url: string,
	token: string | undefined,
	boundary: string,
	headers: Record<string, string>,
	onResponse: (res: http.IncomingMessage) => void,
): http.ClientRequest {
	const u = new URL(url);
	return http.request(
		{
			host: u.hostname,
			port: u.port,
			path: u.pathname + u.search,
			method: "POST",
			headers: { "content-type": `multipart/form-data; boundary=${boundary}`, ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
		},
		onResponse,
	);
}

/** Fills `n` bytes in 64 KiB chunks written with backpressure: the client never holds the file. */
export function streamedUpload(
	url: string,
	token: string | undefined,
	bytes: number,
	opts: { name?: string; fill?: number; abortAfter?: number; boundary?: string } = {},
): Promise<UploadResult> {
	const boundary = opts.boundary ?? `----files${Math.random().toString(16).slice(2)}`;
	const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${opts.name ?? "big.bin"}"\r\nContent-Type: application/octet-stream\r\n\r\n`);
	const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
	return new Promise((resolve, reject) => {
		const req = postMultipart(url, token, boundary, { "content-length": String(head.length + bytes + tail.length) }, (res) => answerOf(res).then(resolve, reject));
		req.on("error", reject);
		const chunk = Buffer.alloc(64 * 1024, opts.fill ?? 0x61);
		let sent = 0;
		req.write(head);
		const pump = () => {
			while (sent < bytes) {
				if (opts.abortAfter !== undefined && sent >= opts.abortAfter) {
					// The client dies mid-upload.
					req.destroy();
					resolve({ status: 0, body: null, headers: {} });
					return;
				}
				const n = Math.min(chunk.length, bytes - sent);
				const ok = req.write(n === chunk.length ? chunk : chunk.subarray(0, n));
				sent += n;
				if (!ok) return void req.once("drain", pump);
			}
			req.end(tail);
		};
		pump();
	});
}
