/**
 * A live cursor (docs/realtime.md): `GET /<service>/<collection>/cursor?live=true` as server-sent events. The
 * listing's frames are counted, not kept (the table shows its page from the list route); after `event: live`, each
 * `change` frame is handed over as it comes. EventSource cannot send a header, so the token travels as `?token=`;
 * when the stream ends (a refused or expired token, a stopping gateway, the network), it is opened again with the
 * current token from the last position it received, so a refreshed token resumes without a gap.
 */
import { accessToken, withQuery } from "./api";

export interface Change {
	op: "enter" | "update" | "leave";
	id: string;
	data?: Record<string, unknown>;
}

export interface LiveHandlers {
	onLive(): void;
	onChange(c: Change): void;
	/** The stream's state for the page: `connecting`, `live`, or why it stopped. */
	onState(state: string): void;
}

export function openLive(path: string, params: Record<string, unknown>, h: LiveHandlers): () => void {
	let source: EventSource | undefined;
	let position: string | undefined;
	let closed = false;
	let retry: ReturnType<typeof setTimeout> | undefined;
	let failures = 0;

	const open = () => {
		const token = accessToken();
		if (closed || !token) return;
		h.onState("connecting");
		source = new EventSource(withQuery(`${path}/cursor`, { ...params, live: "true", token, last_event_id: position }));
		source.addEventListener("live", (e) => {
			position = (e as MessageEvent).lastEventId || position;
			failures = 0;
			h.onState("live");
			h.onLive();
		});
		source.addEventListener("change", (e) => {
			const m = e as MessageEvent;
			position = m.lastEventId || position;
			h.onChange(JSON.parse(m.data) as Change);
		});
		source.addEventListener("error", (e) => {
			const data = (e as MessageEvent).data;
			source?.close();
			if (closed) return;
			let body: { statusCode?: number; message?: string } = {};
			try {
				body = data ? JSON.parse(data) : {};
			} catch {
				/* not the error body */
			}
			// A position the stream no longer knows (400, 410): start over without it.
			if (body.statusCode === 400 || body.statusCode === 410) position = undefined;
			failures++;
			h.onState(body.message ? `stopped (${body.statusCode} ${body.message}); reconnecting` : "reconnecting");
			// 403 and 429 do not heal by retrying at once: back off.
			retry = setTimeout(open, Math.min(30_000, 1000 * 2 ** Math.min(failures - 1, 5)));
		});
	};
	open();
	return () => {
		closed = true;
		clearTimeout(retry);
		source?.close();
	};
}
