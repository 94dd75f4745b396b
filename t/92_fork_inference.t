use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(in_forked_child);
use LughTestInference qw(smollm2 argmax);

# A session keeps its CPU worker threads between forward passes; a forked
# child has none of them, so it must start its own instead of waiting on
# threads that are not there (that would hang: alarm turns it into a failure).

my ($model, $inference) = smollm2();
my @prompt = (504, 3575, 282, 4649, 314);
my @l = $inference->forward(\@prompt);
my @ids = $inference->generate(\@prompt, max_tokens => 4, greedy => 1);

for my $round (1, 2) {
    my $status = in_forked_child(sub {
        my @child = $inference->forward(\@prompt);
        my @gen   = $inference->generate(\@prompt, max_tokens => 4, greedy => 1);
        return argmax(\@child) == argmax(\@l) && "@gen" eq "@ids";
    });
    is($status, 0, "round $round: a forked child runs the parent's session and gets the same tokens");
}

my @again = $inference->forward(\@prompt);
is(argmax(\@again), argmax(\@l), 'the parent still runs after its children');
undef $inference;
undef $model;
pass('freed afterwards');

done_testing;
