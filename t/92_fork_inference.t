use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTestInference qw(smollm2 argmax);

# A session keeps its CPU worker threads between forward passes; a forked
# child has none of them, so it must start its own instead of waiting on
# threads that are not there (that would hang: alarm turns it into a failure).

my ($model, $inference) = smollm2();
my @prompt = (504, 3575, 282, 4649, 314);
my @l = $inference->forward(\@prompt);
my @ids = $inference->generate(\@prompt, max_tokens => 4, greedy => 1);

for my $round (1, 2) {
    my $pid = fork;
    BAIL_OUT("fork failed: $!") unless defined $pid;
    if (!$pid) {
        alarm 60;
        my @child = $inference->forward(\@prompt);
        my @gen   = $inference->generate(\@prompt, max_tokens => 4, greedy => 1);
        exit(argmax(\@child) == argmax(\@l) && "@gen" eq "@ids" ? 0 : 1);
    }
    waitpid $pid, 0;
    is($?, 0, "round $round: a forked child runs the parent's session and gets the same tokens");
}

my @again = $inference->forward(\@prompt);
is(argmax(\@again), argmax(\@l), 'the parent still runs after its children');
undef $inference;
undef $model;
pass('freed afterwards');

done_testing;
