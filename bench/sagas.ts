/**
 * The saga scenario of `npm run bench`: clients each running whole sagas (start, 3 staged creates, commit) for a
 * fixed time, and the delay from a saga's expiry to its compensation (the watcher's scan).
 */
export interface SagaRow {
	sagas: number;
	rps: number;
	sagasPerSecond: number;
	p50: number;
	p99: number;
	errors: number;
}

const pct = (xs: number[], q: number) => (xs.length ? xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))] : 0);

/** The platform's JSON answer, as the caller says it is shaped (`T`). */
async function call<T = unknown>(base: string, token: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
	const r = await fetch(base + path, {
		method,
		headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
		body: body === undefined ? undefined : JSON.stringify(body),
	});
	const j = await r.json().catch(() => null);
	if (r.status !== 200) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(j)}`);
	return j as T;
}

export async function sagaBench(base: string, token: string, durationS: number, clients = 10): Promise<SagaRow> {
	const lat: number[] = [];
	let errors = 0;
	const until = Date.now() + durationS * 1000;
	const started = Date.now();
	await Promise.all(
		Array.from({ length: clients }, async (_, c) => {
			let n = 0;
			while (Date.now() < until) {
				const t0 = performance.now();
				try {
					const s = (await call<{ data: { id: string } }>(base, token, "POST", "/essential/sagas/start", { ttl: 60 })).data.id;
					for (let i = 0; i < 3; i++) await call(base, token, "POST", "/content/notes", { title: `saga ${c}-${n}-${i}` }, { "x-saga-session": s });
					await call(base, token, "GET", `/essential/sagas/${s}/commit`);
					lat.push(performance.now() - t0);
				} catch {
					errors++;
				}
				n++;
			}
		}),
	);
	const secs = (Date.now() - started) / 1000;
	return {
		sagas: lat.length,
		rps: Math.round((lat.length * 5) / secs),
		sagasPerSecond: Math.round(lat.length / secs),
		p50: Math.round(pct(lat, 0.5)),
		p99: Math.round(pct(lat, 0.99)),
		errors,
	};
}

/** `count` sagas of ttl 5 s with one staged write each; the delay from `expires_at` to `aborted_at`. */
export async function expiryBench(base: string, token: string, count = 20): Promise<{ count: number; p50: number; max: number }> {
	const sagas: Array<{ id: string; expires_at: string }> = [];
	for (let i = 0; i < count; i++) {
		const s = (await call<{ data: { id: string; expires_at: string } }>(base, token, "POST", "/essential/sagas/start", { ttl: 5 })).data;
		await call(base, token, "POST", "/content/notes", { title: `expiring ${i}` }, { "x-saga-session": s.id });
		sagas.push(s);
	}
	const delays = new Map<string, number>();
	const deadline = Date.now() + 60_000;
	while (delays.size < sagas.length && Date.now() < deadline) {
		await new Promise((r) => setTimeout(r, 250));
		for (const s of sagas) {
			if (delays.has(s.id)) continue;
			const d = (await call<{ data: { state: string; aborted_at: string } }>(base, token, "GET", `/essential/sagas/${s.id}`)).data;
			if (d.state === "ABORTED") delays.set(s.id, Date.parse(d.aborted_at) - Date.parse(s.expires_at));
		}
	}
	const xs = [...delays.values()];
	return { count: xs.length, p50: pct(xs, 0.5), max: xs.length ? Math.max(...xs) : 0 };
}
