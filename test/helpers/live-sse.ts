/** An open server-sent event stream (a live cursor) read frame by frame, for tests and the bench. */
import http from "http";

export interface SseFrame {
	event?: string;
	id?: string;
	data: string;
	/** When the frame's last byte arrived (performance.now()). */
	at: number;
}

export interface LiveStream {
	status: number;
	headers: http.IncomingHttpHeaders;
	frames: SseFrame[];
	/** The raw text received so far (comments included). */
	text(): string;
	/** Frames of `event: change`, parsed. */
	changes(): Array<{ op: string; id: string; data?: Record<string, any>; position: string }>;
	/** Resolves with the first frame (from `from` on) that satisfies `pred`; rejects after `ms`. */
	waitFor(pred: (f: SseFrame) => boolean, ms?: number, from?: number): Promise<SseFrame>;
	/** Resolves when the server ends the response. */
	ended: Promise<void>;
	close(): void;
}

/** Opens `GET url` with the headers and resolves once the status line is in (the body keeps coming). */
export function openStream(url: string, headers: Record<string, string>, onFrame?: (f: SseFrame) => void): Promise<LiveStream> {
	return new Promise((resolve, reject) => {
		const req = http.get(url, { headers: { accept: "text/event-stream", ...headers }, agent: false }, (res) => {
			res.setEncoding("utf8");
			let raw = "";
			let buf = "";
			const frames: SseFrame[] = [];
			const waiters = new Set<() => void>();
			let endedResolve!: () => void;
			const ended = new Promise<void>((r) => (endedResolve = r));
			res.on("data", (chunk: string) => {
				raw += chunk.length < 1e6 ? chunk : "";
				buf += chunk;
				let i: number;
				while ((i = buf.indexOf("\n\n")) >= 0) {
					const block = buf.slice(0, i);
					buf = buf.slice(i + 2);
					if (!block.trim() || block.startsWith(":")) continue;
					const f: SseFrame = { data: "", at: performance.now() };
					for (const line of block.split("\n")) {
						const j = line.indexOf(": ");
						const k = j < 0 ? line : line.slice(0, j);
						const v = j < 0 ? "" : line.slice(j + 2);
						if (k === "event") f.event = v;
						else if (k === "id") f.id = v;
						else if (k === "data") f.data = v;
					}
					frames.push(f);
					onFrame?.(f);
				}
				for (const w of [...waiters]) w();
			});
			let isEnded = false;
			const done = () => {
				isEnded = true;
				endedResolve();
				for (const w of [...waiters]) w();
			};
			res.on("end", done);
			res.on("close", done);
			res.on("error", done);
			const stream: LiveStream = {
				status: res.statusCode ?? 0,
				headers: res.headers,
				frames,
				text: () => raw,
				changes: () => frames.filter((f) => f.event === "change").map((f) => ({ ...JSON.parse(f.data), position: f.id! })),
				waitFor(pred, ms = 5000, from = 0) {
					return new Promise((res2, rej) => {
						const check = () => {
							const f = frames.slice(from).find(pred);
							if (f) {
								cleanup();
								res2(f);
							} else if (isEnded) {
								cleanup();
								rej(new Error(`stream ended before the frame; frames: ${JSON.stringify(frames.slice(-5))}`));
							}
						};
						const timer = setTimeout(() => {
							cleanup();
							rej(new Error(`no such frame within ${ms} ms; last frames: ${JSON.stringify(frames.slice(-5))}`));
						}, ms);
						const cleanup = () => {
							clearTimeout(timer);
							waiters.delete(check);
						};
						waiters.add(check);
						check();
					});
				},
				ended,
				close: () => req.destroy(),
			};
			resolve(stream);
		});
		req.on("error", reject);
	});
}

/**
 * The live cursors a suite opens on a platform (`url()`: its base URL): `live` opens one as `token` (`qs` after
 * `?live=true`), `closeAll` closes every one opened so far (the suite's afterEach and afterAll).
 */
export function liveStreams(url: () => string) {
	const open: LiveStream[] = [];
	return {
		async live(token: string, qs = "", headers: Record<string, string> = {}, path = "/content/notes/cursor"): Promise<LiveStream> {
			const s = await openStream(`${url()}${path}?live=true${qs}`, { authorization: `Bearer ${token}`, ...headers });
			open.push(s);
			return s;
		},
		closeAll(): void {
			for (const s of open.splice(0)) s.close();
		},
	};
}

/** The first `event: change` frame of a stream about document `id` with `op`. */
export const changeFrame = (s: LiveStream, id: string, op: string, ms = 8000): Promise<SseFrame> =>
	s.waitFor((f) => f.event === "change" && JSON.parse(f.data).id === id && JSON.parse(f.data).op === op, ms);
