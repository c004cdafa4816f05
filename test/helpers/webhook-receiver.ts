/** A webhook receiver on 127.0.0.1 that answers 200 and keeps every JSON body it is sent (`{ unreadable: true }` else). */
import http from "http";

export interface WebhookReceiver {
	received: any[];
	/** The receiver's URL with `path`. */
	url(path?: string): string;
	close(): Promise<void>;
}

export async function webhookReceiver(): Promise<WebhookReceiver> {
	const received: any[] = [];
	const server = http.createServer((req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			try {
				received.push(JSON.parse(Buffer.concat(chunks).toString("utf8")));
			} catch {
				received.push({ unreadable: true });
			}
			res.writeHead(200).end("ok");
		});
	});
	await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
	const port = (server.address() as { port: number }).port;
	return {
		received,
		url: (path = "/hook") => `http://127.0.0.1:${port}${path}`,
		async close() {
			server.closeAllConnections();
			await new Promise((r) => server.close(r));
		},
	};
}
