/** The count of unauthenticated MQTT connections (finding 10): caps in all and per address, IPv6 by /64. */
import { PreAuthGate, preAuthKey } from "../../lib/mqtt";

test("per address and in all; a release frees one slot, once", () => {
	const gate = new PreAuthGate({ maxConnections: 5, maxPerIp: 2 });
	const a1 = gate.admit("10.0.0.1");
	expect(a1).not.toBeNull();
	expect(gate.admit("::ffff:10.0.0.1")).not.toBeNull();
	expect(gate.admit("10.0.0.1")).toBeNull();
	a1!();
	a1!();
	expect(gate.size).toBe(1);
	expect(gate.admit("10.0.0.1")).not.toBeNull();
	expect(gate.admit("10.0.0.1")).toBeNull();
	for (const ip of ["10.0.0.2", "10.0.0.3", "10.0.0.4"]) expect(gate.admit(ip)).not.toBeNull();
	expect(gate.size).toBe(5);
	expect(gate.admit("10.0.0.9")).toBeNull();
});

test("IPv6 addresses count by their /64", () => {
	expect(preAuthKey("2001:db8:1:2::1")).toBe(preAuthKey("2001:db8:1:2:ffff:ffff:ffff:ffff"));
	expect(preAuthKey("2001:db8:1:2::1")).not.toBe(preAuthKey("2001:db8:1:3::1"));
	expect(preAuthKey("::ffff:192.0.2.1")).toBe("192.0.2.1");
	const gate = new PreAuthGate({ maxConnections: 100, maxPerIp: 1 });
	expect(gate.admit("2001:db8:1:2::1")).not.toBeNull();
	expect(gate.admit("2001:db8:1:2::abcd")).toBeNull();
});
