# bench/serve-load, small: 200 requests from 16 clients against `lugh serve`,
# good ones mixed with bad input (malformed JSON, wrong types, an unknown
# model, a prompt over the slot's context, a body over the size limit,
# clients that leave mid-stream, a slow client) and 503s; every request
# answered once and right, RSS flat, the server alive at the end. The full
# run (1,000 requests) is `perl -Mblib bench/serve-load`.
use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(require_model);
use Lugh;
use Lugh::Server;

plan skip_all => 'this Lugh was built without the server' unless Lugh::Server->available;
require_model('smollm2-135m-q4_1');
my $out = `$^X -Mblib bench/serve-load --requests=200 2>&1`;
my $status = $? >> 8;
diag($out);
is($status, 0, 'bench/serve-load --requests=200: every check passed');
like($out, qr/^ok\s+every request answered once/m, 'every request answered once');
like($out, qr/^ok\s+RSS flat/m, 'RSS flat');
done_testing;
