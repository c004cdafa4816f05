/** Free ports for tests: a gateway PORT, and an OPS_PORT_OFFSET whose shifted spec ports are all free. */
import net from "net";
import { DOMAINS } from "../../catalog";

/** A port the OS considers free right now (bound to 0, read, released). */
export function freePort(): Promise<number> {
	return new Promise((resolve, reject) => {
		const s = net.createServer();
		s.unref();
		s.once("error", reject);
		s.listen(0, "127.0.0.1", () => {
			const port = (s.address() as net.AddressInfo).port;
			s.close(() => resolve(port));
		});
	});
}

function portIsFree(port: number): Promise<boolean> {
	return new Promise((resolve) => {
		const s = net.createServer();
		s.unref();
		s.once("error", () => resolve(false));
		s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
	});
}

/** Spec ports of the domains (3020..3150): what an ops offset must keep clear. */
export const DOMAIN_SPEC_PORTS = DOMAINS.map((d) => d.restPort);

/**
 * An OPS_PORT_OFFSET (random, 20000..49999) such that every given spec port plus the offset is free, so tests
 * never bind the standard ports of anything else and parallel runs rarely meet.
 */
export async function freeOpsOffset(specPorts: number[] = DOMAIN_SPEC_PORTS): Promise<number> {
	for (let attempt = 0; attempt < 50; attempt++) {
		const offset = 20000 + Math.floor(Math.random() * 30000);
		const free = await Promise.all(specPorts.map((p) => portIsFree(p + offset)));
		if (free.every(Boolean)) return offset;
	}
	throw new Error("no free ops port offset found");
}
