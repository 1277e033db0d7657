-- One lease for every cap a host shares, atomic on the server. Time is the
-- server's own (TIME), so the hosts' clocks never meet.
--
-- KEYS[1]: hash, host -> when it was last seen (ms of the server's clock).
-- KEYS[2]: hash, host -> "until\nfigures": its figures on a device the
-- hosts share by weight, held until its lease ends.
-- KEYS[k], k >= 3: hash per shared cap, host -> "grant until demand cap used".
-- ARGV[1]: the host; ARGV[2]: the lease in ms; ARGV[3]: how long a host
-- counts as seen, in ms; ARGV[4]: its figures on a shared device ("":
-- none). Per cap KEYS[k]: ARGV[4k-7] the host's cap, ARGV[4k-6] its
-- demand (-1: as much as it can get), ARGV[4k-5] its use, per second, and
-- ARGV[4k-4] the most it will take (-1: no bound), what a host rejoining
-- after a gap holds itself to: what it is granted is held from the
-- others, so it is never granted more.
--
-- Returns the server's time and the hosts seen; the number of hosts'
-- figures on a shared device, and each as the host and its figures
-- (this host's included); then per cap: the rate
-- granted, the host's fair share (more than the grant where the others'
-- leases hold the rest), the use of every host holding a lease (this
-- one's included), how many hold one, and the cap they share (the
-- smallest of theirs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local host, lease, window = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('HSET', KEYS[1], host, now)
local seen = 0
local hosts = redis.call('HGETALL', KEYS[1])
for i = 1, #hosts, 2 do
	if now - tonumber(hosts[i + 1]) <= window then
		seen = seen + 1
	else
		redis.call('HDEL', KEYS[1], hosts[i])
	end
end
redis.call('PEXPIRE', KEYS[1], window)
local out = {now, seen}
if ARGV[4] == '' then
	redis.call('HDEL', KEYS[2], host)
else
	redis.call('HSET', KEYS[2], host, (now + lease) .. '\n' .. ARGV[4])
end
local shares = redis.call('HGETALL', KEYS[2])
local pool = {}
for i = 1, #shares, 2 do
	local nl = string.find(shares[i + 1], '\n', 1, true)
	if nl ~= nil and tonumber(string.sub(shares[i + 1], 1, nl - 1)) > now then
		pool[#pool + 1] = shares[i]
		pool[#pool + 1] = string.sub(shares[i + 1], nl + 1)
	else
		redis.call('HDEL', KEYS[2], shares[i])
	end
end
redis.call('PEXPIRE', KEYS[2], window + lease)
out[#out + 1] = #pool / 2
for i = 1, #pool do
	out[#out + 1] = pool[i]
end
for k = 3, #KEYS do
	local a = 4 * k - 7
	local mine, demand, used, most = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
	local cap, committed, total, holders = mine, 0, used, 1
	local want = {demand}
	local all = redis.call('HGETALL', KEYS[k])
	for i = 1, #all, 2 do
		if all[i] ~= host then
			local f = {}
			for v in string.gmatch(all[i + 1], '%S+') do
				f[#f + 1] = tonumber(v)
			end
			if f[2] > now then
				committed = committed + f[1]
				total = total + f[5]
				holders = holders + 1
				want[#want + 1] = f[3]
				if f[4] < cap then
					cap = f[4]
				end
			elseif now - f[2] > window then
				redis.call('HDEL', KEYS[k], all[i])
			end
		end
	end
	-- Max-min fairness: the smallest demands met first, and an equal share
	-- of what is left for those that want more; where every demand is met,
	-- what is left is shared equally on top.
	for i = 1, #want do
		if want[i] < 0 then
			want[i] = math.huge
		end
	end
	table.sort(want)
	local left, n, level = cap, #want, nil
	for i = 1, n do
		local share = left / (n - i + 1)
		if want[i] > share then
			level = share
			break
		end
		left = left - want[i]
	end
	local fair
	if level == nil then
		fair = demand + left / n
	elseif demand < 0 then
		fair = level
	else
		fair = math.min(demand, level)
	end
	if most >= 0 and fair > most then
		fair = most
	end
	-- Never more than the others leave: their leases hold until they end.
	local grant = math.floor(math.max(0, math.min(fair, cap - committed)))
	redis.call('HSET', KEYS[k], host, grant .. ' ' .. (now + lease) .. ' ' .. demand .. ' ' .. mine .. ' ' .. used)
	redis.call('PEXPIRE', KEYS[k], window + lease)
	out[#out + 1] = grant
	out[#out + 1] = math.floor(fair)
	out[#out + 1] = total
	out[#out + 1] = holders
	out[#out + 1] = cap
end
return out
