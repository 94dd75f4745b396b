use strict;
use warnings;
use Test::More;
use lib 't/lib';
use LughTest qw(model_path croaks_like);
use LughTestInference qw(run_parity_set max_abs_diff);
use Lugh;

# RoPE scaling against llama.cpp b11434 with the same settings
# (bench/make-reference: sets rope-linear and rope-yarn), on the ~810-token
# long-context prompt: linear x2 (--rope-scaling linear --rope-scale 2), and
# YaRN x4 from a declared original context of 256 positions
# (--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 256), so the prompt is
# longer than the context the scaling starts from. Top-20 logits within 0.05
# and 16-token greedy continuations identical, for each model and flash
# attention on and off.
my %rope = (
    'rope-linear' => Lugh::RoPE->new(scaling_type => 'linear', freq_scale => 0.5),
    'rope-yarn'   => Lugh::RoPE->new(scaling_type => 'yarn', freq_scale => 0.25, n_ctx_orig => 256),
    # every YaRN parameter set (--rope-freq-base 20000 --yarn-ext-factor 0.5
    # --yarn-beta-fast 16 --yarn-beta-slow 2)
    'rope-yarn-custom' => Lugh::RoPE->yarn(256, 1024, freq_base => 20000, ext_factor => 0.5, beta_fast => 16,
        beta_slow => 2),
);
for my $set (sort keys %rope) {
    my $checked = run_parity_set(
        set               => $set,
        tolerance         => 0.05,
        greedy            => 16,
        inference_options => { rope => $rope{$set} },
    );
    diag("$set: $checked cases checked");
}

# The same settings given per call equal them given to the session; the
# model's own settings change nothing; other settings change the logits.
SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip('test model smollm2-135m-q4_1 not found', 1);
    my $model   = Lugh::Model->new(model => $path);
    my @tokens  = (1 .. 40);
    my $yarn    = $rope{'rope-yarn'};
    my $session = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2, rope => $yarn);
    my $plain   = Lugh::Inference->new(model => $model, n_ctx => 256, n_threads => 2);
    my @by_session = $session->forward(tokens => \@tokens);
    my @per_call   = $plain->forward(tokens => \@tokens, rope => $yarn);
    is(max_abs_diff(\@by_session, \@per_call), 0, 'rope per call equals rope for the session');
    my @unscaled = $plain->forward(tokens => \@tokens);
    cmp_ok(max_abs_diff(\@unscaled, \@per_call), '>', 0.01, 'YaRN changes the logits');
    is(max_abs_diff(\@unscaled, [ $plain->forward(tokens => \@tokens) ]), 0,
        'a call after one with rope uses the session settings again');
    my $own = Lugh::RoPE->from_model($model);
    is(max_abs_diff(\@unscaled, [ $plain->forward(tokens => \@tokens, rope => $own) ]), 0,
        'from_model asks for the settings the model has');
    is(max_abs_diff(\@unscaled, [ $plain->forward(tokens => \@tokens, rope => Lugh::RoPE->none) ]), 0,
        'none on a model without scaling changes nothing');
    my @gen_call = $plain->generate(\@tokens, greedy => 1, max_tokens => 4, rope => $yarn);
    my @gen_sess = $session->generate(\@tokens, greedy => 1, max_tokens => 4);
    is_deeply(\@gen_call, \@gen_sess, 'generate with rope equals the session with rope');
    my $lp_call = $plain->logprobs(\@tokens, rope => $yarn);
    my $lp_sess = $session->logprobs(\@tokens);
    is($lp_call->{nll}, $lp_sess->{nll}, 'logprobs with rope equals the session with rope');
    is($own->scaling_type_name, 'linear', 'from_model: the type (the GGUF default, linear)');
    is($own->n_ctx_orig, $model->n_ctx_train, 'from_model: the original context');
}

# Constructors, presets and accessors (Lugh 0.12's names).
{
    my $r = Lugh::RoPE->linear(4096, 16384);
    is($r->scaling_type, Lugh::RoPE::ROPE_SCALING_LINEAR, 'linear: type');
    is($r->freq_scale, 0.25, 'linear: freq_scale n_ctx_orig / target_ctx');
    is(Lugh::RoPE->linear_2x(2048)->target_ctx, 4096, 'linear_2x');
    is(Lugh::RoPE->linear_4x(2048)->freq_scale, 0.25, 'linear_4x');
    is(Lugh::RoPE->yarn_32k(4096)->target_ctx, 32768, 'yarn_32k');
    is(Lugh::RoPE->yarn_64k(4096)->freq_scale, 1 / 16, 'yarn_64k');
    is(Lugh::RoPE->yarn_128k(4096)->scaling_type_name, 'yarn', 'yarn_128k');
    my $y = Lugh::RoPE->yarn(4096, 32768, beta_fast => 16, beta_slow => 2, ext_factor => 0.5, attn_factor => 1.5);
    is_deeply([ map { $y->$_ } qw(beta_fast beta_slow ext_factor attn_factor) ], [ 16, 2, 0.5, 1.5 ],
        'yarn: its options');
    is(Lugh::RoPE->new(scaling_type => Lugh::RoPE::ROPE_SCALING_YARN)->scaling_type_name, 'yarn',
        'a constant as the type');
    is(Lugh::RoPE->new->scaling_type_name, 'none', 'new without options: none');
    is(Lugh::RoPE->new(scaling_type => 'none', freq_scale => 0)->freq_scale, 1, 'none: freq_scale 1');
    is(Lugh::RoPE->new(freq_base => 0)->freq_base, 0, 'freq_base 0: the model\'s');
}

# Bad values croak naming them (Lugh 0.12's RoPE error cases among them).
croaks_like(sub { Lugh::RoPE->new(scaling_type => 999) }, qr/Unknown scaling_type 999 \(valid/, 'unknown type number');
croaks_like(sub { Lugh::RoPE->new(scaling_type => 'dynamic') }, qr/Unknown scaling_type 'dynamic' \(valid/,
    'unknown type name');
croaks_like(sub { Lugh::RoPE->new(freq_scale => -1.0) }, qr/freq_scale must be a finite number >= 0/,
    'negative freq_scale');
croaks_like(sub { Lugh::RoPE->new(freq_base => -5) }, qr/freq_base must be/, 'negative freq_base');
croaks_like(sub { Lugh::RoPE->new(ext_factor => 2) }, qr/ext_factor must be between 0 and 1/, 'ext_factor > 1');
croaks_like(sub { Lugh::RoPE->new(beta_fast => 0) }, qr/beta_fast must be a finite number > 0/, 'beta_fast 0');
croaks_like(sub { Lugh::RoPE->new(attn_factor => 'x') }, qr/attn_factor/, 'a non-number');
croaks_like(sub { Lugh::RoPE->new(n_ctx_orig => -1) }, qr/n_ctx_orig must be an integer >= 0/, 'negative n_ctx_orig');
croaks_like(sub { Lugh::RoPE->new(bogus => 1) }, qr/unknown option 'bogus'/, 'unknown option');
croaks_like(sub { Lugh::RoPE->new('linear') }, qr/Usage/, 'odd arguments');
croaks_like(sub { Lugh::RoPE->linear(4096) }, qr/Usage: Lugh::RoPE->linear/, 'linear without a target');
croaks_like(sub { Lugh::RoPE->linear_2x(0) }, qr/context length must be an integer >= 1/, 'preset of 0');
croaks_like(sub { Lugh::RoPE->yarn(4096, 8192, n_ctx_orig => 1) }, qr/given by the arguments/, 'yarn: context twice');
croaks_like(sub { Lugh::RoPE->from_model('not a model') }, qr/Lugh::Model/, 'from_model without a model');
SKIP: {
    my $path = model_path('smollm2-135m-q4_1') or skip('test model smollm2-135m-q4_1 not found', 1);
    my $inf = Lugh::Inference->new(model => Lugh::Model->new(model => $path), n_ctx => 64, n_threads => 1);
    croaks_like(sub { $inf->forward(tokens => [1], rope => 'x') }, qr/rope must be a Lugh::RoPE object/,
        'rope => a string');
    croaks_like(sub { $inf->forward(tokens => [1], rope => {}) }, qr/Lugh::RoPE/, 'rope => a hash');
    croaks_like(sub { $inf->generate([1], rope => []) }, qr/Lugh::RoPE/, 'generate rope => an array');
    croaks_like(sub { Lugh::Inference->new(model => $inf->model, rope => 1) }, qr/rope must be a Lugh::RoPE/,
        'new rope => a number');
    ok(scalar $inf->forward(tokens => [1]), 'the session works after the croaks');
}

done_testing;
