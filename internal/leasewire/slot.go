package leasewire

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = 16384

// LeaseSlot returns the Redis Cluster hash slot of every key of the lease called name: the
// CRC16 (XMODEM, as Redis computes it) of its hash tag {NAME}, modulo SlotCount. Keys of
// leases that share a slot are served by one Cluster node and may be touched by one script
// call (leasekit.Batch.RenewMany).
func LeaseSlot(name string) int {
	var crc uint16
	for i := 0; i < len(name); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^name[i]]
	}
	return int(crc) % SlotCount
}

// crc16Table is the CRC16/XMODEM (polynomial 0x1021) of each byte value, read-only: a Group
// renewing on a Cluster computes the slot of every lease it holds in each renew batch, a byte
// at a time rather than a bit at a time.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
