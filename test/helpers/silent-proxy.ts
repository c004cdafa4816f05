/**
 * A TCP proxy that can go silent: a partition without resets. Put it between a platform and a real server
 * (PostgreSQL, Redis, NATS on 127.0.0.1) and call `silence()`: every open connection, and every connection opened
 * while silent, stops forwarding in both directions. Nothing is closed and no close is passed on, so neither end
 * learns anything: what one end writes is read and dropped, and an end that closes its socket leaves the other one
 * open (a server session keeps its transaction and locks; a client keeps waiting for its answer).
 *
 * `restore()` ends the partition: new connections forward again. A silenced connection stays silent (its state was
 * lost in the partition, as when a NAT or a load balancer forgot it), so a client recovers only by giving up on it and
 * connecting again; but a close now passes, as a reset once packets flow again: an end that closed during the
 * partition, or closes after it, closes the other end (the server learns that a client which gave up is gone).
 */
import net from "net";

export interface SilentProxy {
	readonly port: number;
	/** `127.0.0.1:<port>`. */
	readonly address: string;
	/**
	 * Stops forwarding: the open connections at once; the new ones too unless `newConnections` is false (only the
	 * connections open now are cut off, new ones forward: a few dead connections among live ones).
	 */
	silence(opts?: { newConnections?: boolean }): void;
	/** New connections forward again; silenced ones stay silent, but their closes pass from now on. */
	restore(): void;
	readonly silent: boolean;
	/** Connections forwarding now, and connections held silent. */
	counts(): { forwarding: number; silenced: number };
	/** Closes every socket (both ends of every connection) and the listener. */
	close(): Promise<void>;
}

interface Pair {
	client: net.Socket;
	server: net.Socket;
	silenced: boolean;
	/** An end closed (or half-closed) while silent: passed on as a reset once the partition ends. */
	closed: boolean;
}

/** Reads and drops whatever arrives; keeps the socket open whatever the other end does, noting that it closed. */
function blackHole(s: net.Socket, p: Pair, healed: () => boolean, reset: (p: Pair) => void): void {
	s.removeAllListeners("data");
	s.removeAllListeners("end");
	s.removeAllListeners("close");
	s.on("data", () => undefined);
	// Keep our side open after the peer's FIN (no close passed on, none answered) while the partition lasts.
	const closed = () => {
		p.closed = true;
		if (healed()) reset(p);
	};
	s.on("end", closed);
	s.on("close", closed);
	s.resume();
}

export async function silentProxy(targetPort: number, targetHost = "127.0.0.1"): Promise<SilentProxy> {
	const pairs = new Set<Pair>();
	let silentNew = false;
	let silentNow = false;

	const reset = (p: Pair) => {
		pairs.delete(p);
		p.client.destroy();
		p.server.destroy();
	};
	const silencePair = (p: Pair) => {
		if (p.silenced) return;
		p.silenced = true;
		blackHole(p.client, p, () => !silentNow, reset);
		blackHole(p.server, p, () => !silentNow, reset);
	};

	const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (client) => {
		const upstream = net.connect({ host: targetHost, port: targetPort, allowHalfOpen: true });
		const pair: Pair = { client, server: upstream, silenced: false, closed: false };
		pairs.add(pair);
		const swallow = () => undefined;
		client.on("error", swallow);
		upstream.on("error", swallow);
		const gone = () => {
			if (pair.silenced) return;
			pairs.delete(pair);
			client.destroy();
			upstream.destroy();
		};
		if (silentNew) {
			silencePair(pair);
			return;
		}
		const forward = (from: net.Socket, to: net.Socket) => {
			from.on("data", (chunk) => {
				if (!pair.silenced && !to.write(chunk)) {
					from.pause();
					to.once("drain", () => pair.silenced || from.resume());
				}
			});
			from.on("end", () => pair.silenced || to.end());
			from.on("close", gone);
		};
		forward(client, upstream);
		forward(upstream, client);
		upstream.once("connect", () => pair.silenced || client.resume());
	});
	server.on("error", () => undefined);
	await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
	const port = (server.address() as net.AddressInfo).port;

	return {
		port,
		address: `127.0.0.1:${port}`,
		get silent() {
			return silentNow;
		},
		silence(opts = {}) {
			silentNow = true;
			silentNew = opts.newConnections !== false;
			for (const p of pairs) silencePair(p);
		},
		restore() {
			silentNow = false;
			silentNew = false;
			for (const p of [...pairs]) if (p.closed) reset(p);
		},
		counts() {
			let silenced = 0;
			for (const p of pairs) if (p.silenced) silenced++;
			return { forwarding: pairs.size - silenced, silenced };
		},
		async close() {
			for (const p of pairs) {
				p.client.destroy();
				p.server.destroy();
			}
			pairs.clear();
			await new Promise<void>((resolve) => server.close(() => resolve()));
		},
	};
}
