/** Multipart uploads for the files tests and the bench: small ones through fetch/FormData, large ones streamed. */
import http from "http";

export interface UploadResult {
	status: number;
	body: any;
	headers: http.IncomingHttpHeaders;
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
	const u = new URL(url);
	return new Promise((resolve, reject) => {
		const req = http.request(
			{
				host: u.hostname,
				port: u.port,
				path: u.pathname + u.search,
				method: "POST",
				headers: {
					"content-type": `multipart/form-data; boundary=${boundary}`,
					"content-length": String(head.length + bytes + tail.length),
					...(token ? { authorization: `Bearer ${token}` } : {}),
				},
			},
			(res) => {
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
					resolve({ status: res.statusCode ?? 0, body, headers: res.headers });
				});
				res.on("error", reject);
			},
		);
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
